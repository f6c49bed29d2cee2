//! Property-based fuzzing of both ends of the `Session` protocol: a real client against a
//! scripted server that sends arbitrary `SessionResponse`s, and the emulator against raw
//! streams that send arbitrary `SessionRequest`s and arbitrary bytes. Properties: no panic
//! anywhere, every call and every stream ends (or keeps answering) within a bound, the
//! session's state stays consistent, and nothing is left behind once everything is over.
//!
//! Case counts default to a CI-friendly number; set `FUZZ_MESSAGES_CASES` for a longer run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::peer;
use crate::raw;

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Once;
use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;
use tokio::task::JoinHandle;
use ydb_coordination::{
    AcquireOptions, Session, SessionOptions, config::DescribeOptions, config::WatchOptions,
    session::SessionState,
};

use peer::{IssueMessage, Peer, Rq, Rs, SessionResponse, StatusCode, session_response};

// ---- shared plumbing ----------------------------------------------------------------------

thread_local! {
    /// Panics seen on this thread (every task of a current-thread runtime runs on it).
    static PANICS: Cell<u64> = const { Cell::new(0) };
}

/// Counts panics per thread, so a panic inside a task the test cannot join (the session
/// driver, the emulator's stream tasks, tonic's connection tasks) still fails the case.
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = PANICS.try_with(|p| p.set(p.get() + 1));
            previous(info);
        }));
    });
}

fn panics() -> u64 {
    PANICS.with(Cell::get)
}

/// Runs one case on a fresh current-thread runtime with paused time and checks that nothing
/// panicked on it, joined or not.
fn run_case<F: Future<Output = ()>>(f: F) {
    count_panics();
    let before = panics();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(f);
    drop(rt);
    assert_eq!(
        panics(),
        before,
        "a task panicked during the case (see the panic message above)"
    );
}

fn cases(default: u32) -> u32 {
    std::env::var("FUZZ_MESSAGES_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default_cases),
        // No regression files: a failure prints the minimal input, which then belongs in a
        // plain test in this file.
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

/// Every status the protocol knows, for weighting towards meaningful ones.
const STATUSES: &[StatusCode] = &[
    StatusCode::Unspecified,
    StatusCode::Success,
    StatusCode::BadRequest,
    StatusCode::Unauthorized,
    StatusCode::InternalError,
    StatusCode::Aborted,
    StatusCode::Unavailable,
    StatusCode::Overloaded,
    StatusCode::SchemeError,
    StatusCode::GenericError,
    StatusCode::Timeout,
    StatusCode::BadSession,
    StatusCode::PreconditionFailed,
    StatusCode::AlreadyExists,
    StatusCode::NotFound,
    StatusCode::SessionExpired,
    StatusCode::Cancelled,
    StatusCode::Undetermined,
    StatusCode::Unsupported,
    StatusCode::SessionBusy,
    StatusCode::ExternalError,
];

/// Known statuses (mostly success), and unknown i32 values.
fn status() -> BoxedStrategy<i32> {
    prop_oneof![
        6 => Just(StatusCode::Success as i32),
        3 => prop::sample::select(STATUSES).prop_map(|s| s as i32),
        1 => any::<i32>(),
    ]
    .boxed()
}

/// Statuses that do not end the session when they come in a `failure` (the client
/// reattaches), and the ones that do.
fn failure_status() -> BoxedStrategy<i32> {
    prop_oneof![
        4 => prop::sample::select(vec![
            StatusCode::Unavailable,
            StatusCode::Timeout,
            StatusCode::Overloaded,
            StatusCode::InternalError,
            StatusCode::Unspecified,
            StatusCode::Success,
            StatusCode::Aborted,
        ])
        .prop_map(|s| s as i32),
        1 => prop::sample::select(STATUSES).prop_map(|s| s as i32),
        1 => any::<i32>(),
    ]
    .boxed()
}

fn issue_leaf() -> BoxedStrategy<IssueMessage> {
    (".{0,12}", any::<u32>(), any::<u32>())
        .prop_map(|(message, issue_code, severity)| IssueMessage {
            message,
            issue_code,
            severity,
            ..IssueMessage::default()
        })
        .boxed()
}

/// Issue lists, nested a few levels deep.
fn issues() -> BoxedStrategy<Vec<IssueMessage>> {
    let nested = issue_leaf().prop_recursive(4, 16, 3, |inner| {
        (issue_leaf(), prop::collection::vec(inner, 0..3)).prop_map(|(mut m, issues)| {
            m.issues = issues;
            m
        })
    });
    prop_oneof![
        3 => Just(Vec::new()),
        1 => prop::collection::vec(nested, 0..3),
    ]
    .boxed()
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

// ---- 1. the client against arbitrary server messages --------------------------------------

/// The session id the scripted server hands out.
const SID: u64 = 42;

/// Semaphore names the client calls use (the last one is longer than the client allows for
/// create and update).
const NAMES: &[&str] = &["a", "b", "lock"];

fn client_name(i: usize) -> String {
    match NAMES.get(i) {
        Some(n) => (*n).to_string(),
        None if i == NAMES.len() => String::new(),
        None => "L".repeat(1_025),
    }
}

/// Which `req_id` a scripted answer carries.
#[derive(Debug, Clone)]
enum ReqId {
    /// One the client has actually used (by index, modulo how many were seen).
    Used(usize),
    /// The most recent one the client used.
    Last,
    /// A small number (the client's ids start at 1).
    Small(u64),
    /// Anything.
    Any(u64),
}

fn req_id() -> BoxedStrategy<ReqId> {
    prop_oneof![
        5 => any::<usize>().prop_map(ReqId::Used),
        3 => Just(ReqId::Last),
        2 => (0u64..24).prop_map(ReqId::Small),
        1 => any::<u64>().prop_map(ReqId::Any),
    ]
    .boxed()
}

/// The owners (or waiters) of a scripted description.
#[derive(Debug, Clone)]
enum Owners {
    None,
    /// A few, each either this session or another one.
    Few(Vec<(bool, u64, u64, Vec<u8>)>),
    /// Many, built at send time (cheap to generate and to shrink).
    Many {
        n: usize,
        with_me: bool,
    },
}

fn owners() -> BoxedStrategy<Owners> {
    prop_oneof![
        3 => Just(Owners::None),
        4 => prop::collection::vec((any::<bool>(), any::<u64>(), any::<u64>(), bytes(8)), 1..4)
            .prop_map(Owners::Few),
        1 => (1_000usize..20_000, any::<bool>()).prop_map(|(n, with_me)| Owners::Many { n, with_me }),
    ]
    .boxed()
}

fn build_owners(o: &Owners) -> Vec<peer::SemaphoreSession> {
    match o {
        Owners::None => Vec::new(),
        Owners::Few(v) => v
            .iter()
            .map(|(me, order_id, count, data)| peer::SemaphoreSession {
                order_id: *order_id,
                session_id: if *me { SID } else { order_id.wrapping_add(1) },
                timeout_millis: *count,
                count: *count,
                data: data.clone(),
            })
            .collect(),
        Owners::Many { n, with_me } => (0..*n as u64)
            .map(|i| peer::SemaphoreSession {
                order_id: i + 1,
                session_id: if *with_me && i == *n as u64 / 2 {
                    SID
                } else {
                    1_000 + i
                },
                timeout_millis: 0,
                count: 1,
                data: Vec::new(),
            })
            .collect(),
    }
}

/// A scripted semaphore description.
#[derive(Debug, Clone)]
struct Desc {
    name: String,
    data: Vec<u8>,
    count: u64,
    limit: u64,
    ephemeral: bool,
    owners: Owners,
    waiters: Owners,
}

fn desc() -> BoxedStrategy<Desc> {
    (
        prop_oneof![
            prop::sample::select(NAMES).prop_map(str::to_string),
            ".{0,10}"
        ],
        bytes(16),
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
        owners(),
        owners(),
    )
        .prop_map(
            |(name, data, count, limit, ephemeral, owners, waiters)| Desc {
                name,
                data,
                count,
                limit,
                ephemeral,
                owners,
                waiters,
            },
        )
        .boxed()
}

/// How a reply of the right type is filled in.
#[derive(Debug, Clone)]
struct Answer {
    status: i32,
    /// `acquired`, `released`, `watch_added`.
    flag: bool,
    /// A description lists this session as an owner.
    with_me: bool,
    /// An acquire gets `acquire_semaphore_pending` instead of a result.
    pending: bool,
    /// A watch gets `describe_semaphore_changed{data, owners}` instead of a result.
    changed: Option<(bool, bool)>,
    order_id: u64,
}

fn answer() -> BoxedStrategy<Answer> {
    (
        prop_oneof![8 => Just(StatusCode::Success as i32), 2 => status()],
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.3, any::<(bool, bool)>()),
        any::<u64>(),
    )
        .prop_map(
            |(status, flag, with_me, pending, changed, order_id)| Answer {
                status,
                flag,
                with_me,
                pending,
                changed,
                order_id,
            },
        )
        .boxed()
}

/// One scripted server message, `req_id` still symbolic.
#[derive(Debug, Clone)]
enum Msg {
    Empty,
    Ping(u64),
    Pong(u64),
    Failure(i32, Vec<IssueMessage>),
    Started(u64, u64),
    Stopped(u64),
    Unsupported(u8),
    Pending(ReqId),
    Acquire(ReqId, i32, Vec<IssueMessage>, bool),
    Release(ReqId, i32, Vec<IssueMessage>, bool),
    Describe(ReqId, i32, Vec<IssueMessage>, Option<Desc>, bool),
    Changed(ReqId, bool, bool),
    Create(ReqId, i32, Vec<IssueMessage>),
    Update(ReqId, i32, Vec<IssueMessage>),
    Delete(ReqId, i32, Vec<IssueMessage>),
    /// A reply of the right type to one of the last requests the client sent.
    Answer(usize, Answer),
    /// Replies of the right type to every request not answered this way yet.
    AnswerAll(Answer),
}

fn msg() -> BoxedStrategy<Msg> {
    prop_oneof![
        1 => Just(Msg::Empty),
        2 => any::<u64>().prop_map(Msg::Ping),
        2 => any::<u64>().prop_map(Msg::Pong),
        1 => (failure_status(), issues()).prop_map(|(s, i)| Msg::Failure(s, i)),
        1 => (prop_oneof![Just(SID), Just(0), any::<u64>()], any::<u64>())
            .prop_map(|(id, t)| Msg::Started(id, t)),
        1 => any::<u64>().prop_map(Msg::Stopped),
        1 => prop::sample::select(vec![6u8, 7, 16, 17, 18]).prop_map(Msg::Unsupported),
        4 => req_id().prop_map(Msg::Pending),
        6 => (req_id(), status(), issues(), any::<bool>())
            .prop_map(|(r, s, i, a)| Msg::Acquire(r, s, i, a)),
        4 => (req_id(), status(), issues(), any::<bool>())
            .prop_map(|(r, s, i, a)| Msg::Release(r, s, i, a)),
        8 => (req_id(), status(), issues(), prop::option::weighted(0.85, desc()), any::<bool>())
            .prop_map(|(r, s, i, d, w)| Msg::Describe(r, s, i, d, w)),
        4 => (req_id(), any::<bool>(), any::<bool>())
            .prop_map(|(r, d, o)| Msg::Changed(r, d, o)),
        3 => (req_id(), status(), issues()).prop_map(|(r, s, i)| Msg::Create(r, s, i)),
        2 => (req_id(), status(), issues()).prop_map(|(r, s, i)| Msg::Update(r, s, i)),
        2 => (req_id(), status(), issues()).prop_map(|(r, s, i)| Msg::Delete(r, s, i)),
        20 => (0usize..8, answer()).prop_map(|(i, a)| Msg::Answer(i, a)),
        6 => answer().prop_map(Msg::AnswerAll),
    ]
    .boxed()
}

/// What an acquire's task does with a granted lease.
#[derive(Debug, Clone, Copy)]
enum AfterGrant {
    /// `lease.release()`.
    Release,
    /// Keeps it until its token fires (the session must end it).
    Hold,
    /// Drops it (a background release).
    Drop,
}

/// A client call, issued from its own task.
#[derive(Debug, Clone)]
enum Call {
    Describe {
        name: usize,
        owners: bool,
        waiters: bool,
    },
    Acquire {
        name: usize,
        count: u64,
        ephemeral: bool,
        /// `None`: wait forever.
        timeout_ms: Option<u64>,
        /// Drop the `Acquire` after this long (a withdrawn acquire).
        cancel_ms: Option<u64>,
        after: AfterGrant,
    },
    TryAcquire {
        name: usize,
    },
    Create {
        name: usize,
        limit: u64,
        data: Vec<u8>,
    },
    Update {
        name: usize,
        data: Vec<u8>,
    },
    Delete {
        name: usize,
        force: bool,
    },
    Watch {
        name: usize,
        data: bool,
        owners: bool,
        items: usize,
    },
}

fn name_index() -> BoxedStrategy<usize> {
    prop_oneof![20 => 0..NAMES.len(), 1 => NAMES.len()..NAMES.len() + 2].boxed()
}

fn call() -> BoxedStrategy<Call> {
    prop_oneof![
        3 => (name_index(), any::<bool>(), any::<bool>())
            .prop_map(|(name, owners, waiters)| Call::Describe { name, owners, waiters }),
        4 => (
            name_index(),
            prop_oneof![3 => Just(1u64), 1 => Just(u64::MAX), 1 => 0u64..4],
            any::<bool>(),
            prop::option::of(prop_oneof![Just(0u64), 1u64..20_000]),
            prop::option::weighted(0.25, 0u64..5_000),
            prop::sample::select(vec![AfterGrant::Release, AfterGrant::Hold, AfterGrant::Drop]),
        )
            .prop_map(|(name, count, ephemeral, timeout_ms, cancel_ms, after)| Call::Acquire {
                name,
                count,
                ephemeral,
                timeout_ms,
                cancel_ms,
                after,
            }),
        1 => name_index().prop_map(|name| Call::TryAcquire { name }),
        2 => (name_index(), prop_oneof![1 => Just(0u64), 6 => Just(1), 2 => any::<u64>()], bytes(8))
            .prop_map(|(name, limit, data)| Call::Create { name, limit, data }),
        1 => (name_index(), bytes(8)).prop_map(|(name, data)| Call::Update { name, data }),
        1 => (name_index(), any::<bool>()).prop_map(|(name, force)| Call::Delete { name, force }),
        2 => (name_index(), any::<bool>(), any::<bool>(), 1usize..40)
            .prop_map(|(name, data, owners, items)| Call::Watch { name, data, owners, items }),
    ]
    .boxed()
}

/// How the scripted server ends the current stream mid-script.
#[derive(Debug, Clone)]
enum Cut {
    End,
    GrpcError,
    Tcp,
    Failure(i32),
}

/// One step of a client case.
#[derive(Debug, Clone)]
enum Step {
    Call(Call),
    Send(Msg),
    /// Sends the same message many times in a row.
    Burst(Msg, u16),
    /// Lets `ms` of (paused) time pass while serving the client.
    Settle(u16),
    Cut(Cut),
}

fn step() -> BoxedStrategy<Step> {
    prop_oneof![
        6 => call().prop_map(Step::Call),
        12 => msg().prop_map(Step::Send),
        1 => (msg(), 2u16..300).prop_map(|(m, n)| Step::Burst(m, n)),
        4 => prop_oneof![Just(0u16), 1u16..50, 50u16..6_000].prop_map(Step::Settle),
        1 => prop_oneof![
            Just(Cut::End),
            Just(Cut::GrpcError),
            Just(Cut::Tcp),
            failure_status().prop_map(Cut::Failure),
        ]
        .prop_map(Step::Cut),
    ]
    .boxed()
}

/// How the scripted server answers a reattach.
#[derive(Debug, Clone)]
enum Reattach {
    Accept,
    /// `session_started` with another id.
    Other(u64),
    /// `failure` and the end of the stream.
    Fail(i32),
    /// No answer at all.
    Silent,
}

fn reattach() -> BoxedStrategy<Reattach> {
    prop_oneof![
        6 => Just(Reattach::Accept),
        1 => prop_oneof![Just(0u64), any::<u64>()].prop_map(Reattach::Other),
        2 => failure_status().prop_map(Reattach::Fail),
        1 => Just(Reattach::Silent),
    ]
    .boxed()
}

/// How a case ends.
#[derive(Debug, Clone)]
enum Finale {
    /// The server vanishes (connections cut, nothing listens any more): the session must
    /// expire within its timeout.
    Vanish,
    /// The server stays but says nothing at all any more (no pongs either).
    Silence,
    /// `session.close()`, the stop answered with `session_stopped` or not at all.
    Close { answer: bool },
    /// `failure{status}` on the current stream, then silence.
    Fail(i32),
}

fn finale() -> BoxedStrategy<Finale> {
    prop_oneof![
        Just(Finale::Vanish),
        Just(Finale::Silence),
        any::<bool>().prop_map(|answer| Finale::Close { answer }),
        prop::sample::select(STATUSES).prop_map(|s| Finale::Fail(s as i32)),
    ]
    .boxed()
}

#[derive(Debug, Clone)]
struct ClientCase {
    /// The session timeout, in seconds.
    timeout_s: u64,
    steps: Vec<Step>,
    reattach: Vec<Reattach>,
    finale: Finale,
}

fn client_case() -> BoxedStrategy<ClientCase> {
    (
        prop_oneof![Just(10u64), 1u64..30],
        prop::collection::vec(step(), 1..40),
        prop::collection::vec(reattach(), 0..4),
        finale(),
    )
        .prop_map(|(timeout_s, steps, reattach, finale)| ClientCase {
            timeout_s,
            steps,
            reattach,
            finale,
        })
        .boxed()
}

/// What the scripted server has seen and decided so far.
struct Script {
    peer: Peer,
    /// The stream the client is attached on (where scripted messages go).
    current: usize,
    /// Every `req_id` the client sent, in order.
    used: Vec<u64>,
    /// Every request the client sent (not pings), for replies of the right type.
    seen: Vec<Rq>,
    /// How many of `seen` an `AnswerAll` has covered.
    answered: usize,
    reattach: VecDeque<Reattach>,
    /// Answer `session_stop` with `session_stopped`.
    answer_stop: bool,
    /// Answer nothing at all (session starts included).
    silent: bool,
}

fn request_req_id(r: &Rq) -> Option<u64> {
    match r {
        Rq::AcquireSemaphore(a) => Some(a.req_id),
        Rq::ReleaseSemaphore(a) => Some(a.req_id),
        Rq::DescribeSemaphore(a) => Some(a.req_id),
        Rq::CreateSemaphore(a) => Some(a.req_id),
        Rq::UpdateSemaphore(a) => Some(a.req_id),
        Rq::DeleteSemaphore(a) => Some(a.req_id),
        _ => None,
    }
}

impl Script {
    /// Serves the client for `wait` (at least one look at what has arrived): records req_ids
    /// and answers session starts as scripted.
    async fn pump(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some((index, r)) = self.peer.recv_any_within(left).await else {
                return;
            };
            let Some(r) = r.request else {
                panic!("the client sent an empty request on stream {index}");
            };
            if let Some(id) = request_req_id(&r) {
                self.used.push(id);
                self.seen.push(r.clone());
            }
            if self.silent {
                continue;
            }
            match r {
                Rq::SessionStart(start) => {
                    assert_eq!(start.session_id, SID, "a reattach of another session");
                    match self.reattach.pop_front().unwrap_or(Reattach::Accept) {
                        Reattach::Accept => {
                            self.peer.send(index, started(SID));
                            self.current = index;
                        }
                        Reattach::Other(id) => {
                            self.peer.send(index, started(id));
                            self.current = index;
                        }
                        Reattach::Fail(status) => {
                            self.peer.send_message(index, failure(status, Vec::new()));
                            self.peer.end(index);
                        }
                        Reattach::Silent => {}
                    }
                }
                Rq::SessionStop(_) if self.answer_stop => {
                    self.peer.send(
                        index,
                        Rs::SessionStopped(session_response::SessionStopped { session_id: SID }),
                    );
                    self.peer.end(index);
                }
                _ => {}
            }
        }
    }

    fn resolve(&self, r: &ReqId) -> u64 {
        match r {
            ReqId::Used(i) if !self.used.is_empty() => self.used[i % self.used.len()],
            ReqId::Used(i) => *i as u64,
            ReqId::Last => self.used.last().copied().unwrap_or(1),
            ReqId::Small(n) => *n,
            ReqId::Any(n) => *n,
        }
    }

    fn build(&self, m: &Msg) -> SessionResponse {
        use session_response as r;
        let response = match m {
            Msg::Empty => None,
            Msg::Ping(o) => Some(Rs::Ping(r::PingPong { opaque: *o })),
            Msg::Pong(o) => Some(Rs::Pong(r::PingPong { opaque: *o })),
            Msg::Failure(status, issues) => return failure(*status, issues.clone()),
            Msg::Started(id, t) => Some(Rs::SessionStarted(r::SessionStarted {
                session_id: *id,
                timeout_millis: *t,
            })),
            Msg::Stopped(id) => Some(Rs::SessionStopped(r::SessionStopped { session_id: *id })),
            Msg::Unsupported(n) => Some(match n {
                6 => Rs::Unsupported6(Default::default()),
                7 => Rs::Unsupported7(Default::default()),
                16 => Rs::Unsupported16(Default::default()),
                17 => Rs::Unsupported17(Default::default()),
                _ => Rs::Unsupported18(Default::default()),
            }),
            Msg::Pending(q) => Some(Rs::AcquireSemaphorePending(r::AcquireSemaphorePending {
                req_id: self.resolve(q),
            })),
            Msg::Acquire(q, status, issues, acquired) => {
                Some(Rs::AcquireSemaphoreResult(r::AcquireSemaphoreResult {
                    req_id: self.resolve(q),
                    status: *status,
                    issues: issues.clone(),
                    acquired: *acquired,
                }))
            }
            Msg::Release(q, status, issues, released) => {
                Some(Rs::ReleaseSemaphoreResult(r::ReleaseSemaphoreResult {
                    req_id: self.resolve(q),
                    status: *status,
                    issues: issues.clone(),
                    released: *released,
                }))
            }
            Msg::Describe(q, status, issues, d, watch_added) => {
                Some(Rs::DescribeSemaphoreResult(r::DescribeSemaphoreResult {
                    req_id: self.resolve(q),
                    status: *status,
                    issues: issues.clone(),
                    semaphore_description: d.as_ref().map(|d| peer::SemaphoreDescription {
                        name: d.name.clone(),
                        data: d.data.clone(),
                        count: d.count,
                        limit: d.limit,
                        ephemeral: d.ephemeral,
                        owners: build_owners(&d.owners),
                        waiters: build_owners(&d.waiters),
                    }),
                    watch_added: *watch_added,
                }))
            }
            Msg::Changed(q, data_changed, owners_changed) => {
                Some(Rs::DescribeSemaphoreChanged(r::DescribeSemaphoreChanged {
                    req_id: self.resolve(q),
                    data_changed: *data_changed,
                    owners_changed: *owners_changed,
                }))
            }
            Msg::Create(q, status, issues) => {
                Some(Rs::CreateSemaphoreResult(r::CreateSemaphoreResult {
                    req_id: self.resolve(q),
                    status: *status,
                    issues: issues.clone(),
                }))
            }
            Msg::Update(q, status, issues) => {
                Some(Rs::UpdateSemaphoreResult(r::UpdateSemaphoreResult {
                    req_id: self.resolve(q),
                    status: *status,
                    issues: issues.clone(),
                }))
            }
            Msg::Answer(..) | Msg::AnswerAll(_) => unreachable!("answers are built by `send`"),
            Msg::Delete(q, status, issues) => {
                Some(Rs::DeleteSemaphoreResult(r::DeleteSemaphoreResult {
                    req_id: self.resolve(q),
                    status: *status,
                    issues: issues.clone(),
                }))
            }
        };
        SessionResponse { response }
    }

    fn send(&mut self, m: &Msg) {
        match m {
            Msg::Answer(i, a) => {
                let n = self.seen.len();
                if n > 0 {
                    let r = &self.seen[n - 1 - i % n.min(8)];
                    let msg = answer_to(r, a);
                    self.peer.send_message(self.current, msg);
                }
            }
            Msg::AnswerAll(a) => {
                let msgs: Vec<_> = self.seen[self.answered..]
                    .iter()
                    .map(|r| answer_to(r, a))
                    .collect();
                self.answered = self.seen.len();
                for msg in msgs {
                    self.peer.send_message(self.current, msg);
                }
            }
            m => {
                let msg = self.build(m);
                self.peer.send_message(self.current, msg);
            }
        }
    }
}

/// A reply of the type `r` expects.
fn answer_to(r: &Rq, a: &Answer) -> SessionResponse {
    use session_response as s;
    let response = match r {
        Rq::AcquireSemaphore(q) if a.pending => {
            Rs::AcquireSemaphorePending(s::AcquireSemaphorePending { req_id: q.req_id })
        }
        Rq::AcquireSemaphore(q) => Rs::AcquireSemaphoreResult(s::AcquireSemaphoreResult {
            req_id: q.req_id,
            status: a.status,
            issues: Vec::new(),
            acquired: a.flag,
        }),
        Rq::DescribeSemaphore(q) if a.changed.is_some() && (q.watch_data || q.watch_owners) => {
            let (data_changed, owners_changed) = a.changed.unwrap_or_default();
            Rs::DescribeSemaphoreChanged(s::DescribeSemaphoreChanged {
                req_id: q.req_id,
                data_changed,
                owners_changed,
            })
        }
        Rq::DescribeSemaphore(q) => Rs::DescribeSemaphoreResult(s::DescribeSemaphoreResult {
            req_id: q.req_id,
            status: a.status,
            issues: Vec::new(),
            semaphore_description: Some(peer::SemaphoreDescription {
                name: q.name.clone(),
                data: b"d".to_vec(),
                count: 1,
                limit: 1,
                ephemeral: false,
                owners: if a.with_me {
                    vec![peer::SemaphoreSession {
                        order_id: a.order_id,
                        session_id: SID,
                        timeout_millis: 0,
                        count: 1,
                        data: Vec::new(),
                    }]
                } else {
                    Vec::new()
                },
                waiters: Vec::new(),
            }),
            watch_added: a.flag,
        }),
        Rq::ReleaseSemaphore(q) => Rs::ReleaseSemaphoreResult(s::ReleaseSemaphoreResult {
            req_id: q.req_id,
            status: a.status,
            issues: Vec::new(),
            released: a.flag,
        }),
        Rq::CreateSemaphore(q) => Rs::CreateSemaphoreResult(s::CreateSemaphoreResult {
            req_id: q.req_id,
            status: a.status,
            issues: Vec::new(),
        }),
        Rq::UpdateSemaphore(q) => Rs::UpdateSemaphoreResult(s::UpdateSemaphoreResult {
            req_id: q.req_id,
            status: a.status,
            issues: Vec::new(),
        }),
        Rq::DeleteSemaphore(q) => Rs::DeleteSemaphoreResult(s::DeleteSemaphoreResult {
            req_id: q.req_id,
            status: a.status,
            issues: Vec::new(),
        }),
        _ => return SessionResponse { response: None },
    };
    SessionResponse {
        response: Some(response),
    }
}

fn started(session_id: u64) -> Rs {
    Rs::SessionStarted(session_response::SessionStarted {
        session_id,
        timeout_millis: 0,
    })
}

fn failure(status: i32, issues: Vec<IssueMessage>) -> SessionResponse {
    SessionResponse {
        response: Some(Rs::Failure(session_response::Failure { status, issues })),
    }
}

/// Starts a client call in its own task.
fn spawn_call(s: &Session, call: Call) -> JoinHandle<()> {
    let s = s.clone();
    tokio::spawn(async move {
        match call {
            Call::Describe {
                name,
                owners,
                waiters,
            } => {
                let opts = DescribeOptions::new().owners(owners).waiters(waiters);
                let _ = s.describe_semaphore(&client_name(name), opts).await;
            }
            Call::Acquire {
                name,
                count,
                ephemeral,
                timeout_ms,
                cancel_ms,
                after,
            } => {
                let mut opts = AcquireOptions::new()
                    .count(count)
                    .ephemeral(ephemeral)
                    .data(b"fuzz".to_vec());
                if let Some(ms) = timeout_ms {
                    opts = opts.timeout(Duration::from_millis(ms));
                }
                let acquire = s.acquire(&client_name(name), opts);
                let result = match cancel_ms {
                    Some(ms) => {
                        match tokio::time::timeout(Duration::from_millis(ms), acquire).await {
                            Ok(r) => r,
                            Err(_) => return, // withdrawn
                        }
                    }
                    None => acquire.await,
                };
                let Ok(lease) = result else {
                    return;
                };
                match after {
                    AfterGrant::Release => {
                        let _ = lease.release().await;
                    }
                    AfterGrant::Hold => lease.cancelled().await,
                    AfterGrant::Drop => drop(lease),
                }
            }
            Call::TryAcquire { name } => {
                if let Ok(Some(lease)) = s
                    .try_acquire(&client_name(name), AcquireOptions::exclusive())
                    .await
                {
                    let _ = lease.release().await;
                }
            }
            Call::Create { name, limit, data } => {
                let _ = s.create_semaphore(&client_name(name), limit, &data).await;
            }
            Call::Update { name, data } => {
                let _ = s.update_semaphore(&client_name(name), &data).await;
            }
            Call::Delete { name, force } => {
                let _ = s.delete_semaphore(&client_name(name), force).await;
            }
            Call::Watch {
                name,
                data,
                owners,
                items,
            } => {
                let opts = WatchOptions::new().data(data).owners(owners);
                let Ok(mut stream) = s.watch_semaphore(&client_name(name), opts).await else {
                    return;
                };
                for _ in 0..items {
                    match stream.next().await {
                        Some(Ok(_)) => {}
                        Some(Err(_)) => {
                            // After an error item the stream is over.
                            assert!(
                                stream.next().await.is_none(),
                                "a watch went on after an error"
                            );
                            return;
                        }
                        None => panic!("a watch stream ended without an error item"),
                    }
                }
            }
        }
    })
}

/// The session's state and token agree, and the state is one a session may be in.
#[track_caller]
fn check_consistent(s: &Session) {
    let state = s.state();
    let cancelled = s.token().is_cancelled();
    match state {
        SessionState::Attached { session_id } => {
            assert_eq!(session_id, SID, "attached to another session");
            assert!(!cancelled, "attached with a cancelled token");
        }
        SessionState::Reattaching { .. } => {
            assert!(!cancelled, "reattaching with a cancelled token");
        }
        SessionState::Expired | SessionState::Closed => {
            assert!(cancelled, "{state:?} with a live token");
            assert!(s.error().is_some(), "{state:?} without a cause");
        }
        other => panic!("unexpected state {other:?}"),
    }
}

/// How long a case may take to wind down after its finale: the session timeout (the client
/// must have given up by then) plus a margin for the last reattach attempt and the stop.
fn wind_down_bound(opts: &SessionOptions) -> Duration {
    opts.get_timeout() + Duration::from_secs(5)
}

async fn client_case_run(case: ClientCase) {
    let opts = SessionOptions::new().timeout(Duration::from_secs(case.timeout_s));
    let bound = wind_down_bound(&opts);
    let mut peer = Peer::start().await;
    let (client, session, index, _) = peer.session(SID, opts).await;
    let mut script = Script {
        peer,
        current: index,
        used: Vec::new(),
        seen: Vec::new(),
        answered: 0,
        reattach: case.reattach.into(),
        answer_stop: false,
        silent: false,
    };
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    for step in &case.steps {
        match step {
            Step::Call(call) => {
                tasks.push(spawn_call(&session, call.clone()));
                script.pump(Duration::from_millis(1)).await;
            }
            Step::Send(m) => {
                script.send(m);
                script.pump(Duration::ZERO).await;
            }
            Step::Burst(m, n) => {
                for _ in 0..*n {
                    script.send(m);
                }
                script.pump(Duration::ZERO).await;
            }
            Step::Settle(ms) => script.pump(Duration::from_millis(u64::from(*ms))).await,
            Step::Cut(cut) => {
                let i = script.current;
                match cut {
                    Cut::End => script.peer.end(i),
                    Cut::GrpcError => script.peer.error(i, tonic::Status::internal("fuzz")),
                    Cut::Tcp => script.peer.cut(),
                    Cut::Failure(status) => {
                        script.peer.send_message(i, failure(*status, Vec::new()));
                        script.peer.end(i);
                    }
                }
                script.pump(Duration::from_millis(1)).await;
            }
        }
        check_consistent(&session);
    }

    // The finale: from here on the server helps no more, and everything must end in time.
    let close = match case.finale {
        Finale::Vanish => {
            script.silent = true;
            script.peer.set_auto_pong(false);
            script.peer.cut();
            None
        }
        Finale::Silence => {
            script.silent = true;
            script.peer.set_auto_pong(false);
            None
        }
        Finale::Fail(status) => {
            script.silent = true;
            script.peer.set_auto_pong(false);
            script
                .peer
                .send_message(script.current, failure(status, Vec::new()));
            script.peer.end(script.current);
            None
        }
        Finale::Close { answer } => {
            script.answer_stop = answer;
            script.reattach.clear();
            script.reattach.push_back(Reattach::Silent);
            let s = session.clone();
            Some(tokio::spawn(async move { s.close().await }))
        }
    };
    let vanish = matches!(case.finale, Finale::Vanish);
    let server = tokio::spawn(async move {
        if vanish {
            drop(script);
            return;
        }
        // Serve (or ignore) the client until the case is over.
        loop {
            script.pump(peer::GUARD).await;
        }
    });
    let started = tokio::time::Instant::now();
    let mut state = session.state_changes();
    let ended = tokio::time::timeout(bound, state.wait_for(SessionState::is_terminal)).await;
    let ended = match ended {
        Ok(Ok(s)) => *s,
        Ok(Err(_)) => panic!("the session's state channel closed before a terminal state"),
        Err(_) => panic!(
            "the session did not end within {bound:?} of the finale {:?}; state {:?}",
            case.finale,
            session.state()
        ),
    };
    check_consistent(&session);
    if matches!(case.finale, Finale::Close { .. }) {
        assert!(ended.is_terminal());
    }
    if let Some(close) = close {
        let left = bound.saturating_sub(started.elapsed());
        tokio::time::timeout(left, close)
            .await
            .expect("close() did not return in time")
            .expect("close() panicked");
    }
    // Every call completes (with anything) within the bound, and none panicked.
    for (i, task) in tasks.into_iter().enumerate() {
        let left = bound.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("call {i} ({:?}) panicked: {e}", call_of(&case.steps, i)),
            Err(_) => panic!(
                "call {i} ({:?}) still pending {bound:?} after the finale",
                call_of(&case.steps, i)
            ),
        }
    }
    // The driver is gone: a new call fails at once instead of hanging.
    let late = tokio::time::timeout(
        Duration::from_millis(1),
        session.describe_semaphore("a", DescribeOptions::new()),
    )
    .await
    .expect("a call on an ended session hung");
    assert!(late.is_err(), "a call on an ended session succeeded");
    let late = tokio::time::timeout(
        Duration::from_millis(1),
        session.acquire("a", AcquireOptions::shared()),
    )
    .await
    .expect("an acquire on an ended session hung");
    assert!(late.is_err(), "an acquire on an ended session succeeded");
    check_consistent(&session);
    server.abort();
    drop(session);
    drop(client);
}

fn call_of(steps: &[Step], i: usize) -> Option<&Call> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Call(c) => Some(c),
            _ => None,
        })
        .nth(i)
}

proptest! {
    #![proptest_config(config(128))]

    /// A session fed arbitrary server messages interleaved with concurrent calls: nothing
    /// panics, the state stays consistent, and after the server vanishes, falls silent, fails
    /// the session or the session is closed, everything ends within the session timeout.
    #[test]
    fn client_survives_arbitrary_server_messages(case in client_case()) {
        run_case(client_case_run(case));
    }
}

// ---- 2. the emulator against arbitrary client messages ------------------------------------

use raw::{NODE, Raw, SessionRequest, session_request};

/// Semaphore names for raw requests: a few shared ones, and long ones.
fn emu_name() -> BoxedStrategy<String> {
    prop_oneof![
        6 => prop::sample::select(vec!["a", "b", "lock", ""]).prop_map(str::to_string),
        2 => "[a-z]{1,6}",
        1 => (1_000usize..4_096).prop_map(|n| "n".repeat(n)),
    ]
    .boxed()
}

fn emu_req_id() -> BoxedStrategy<u64> {
    prop_oneof![3 => 0u64..8, 1 => any::<u64>()].boxed()
}

fn emu_count() -> BoxedStrategy<u64> {
    prop_oneof![
        4 => Just(1u64),
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => 2u64..5,
        1 => any::<u64>(),
    ]
    .boxed()
}

fn emu_timeout() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => Just(0u64),
        2 => 1u64..5_000,
        1 => Just(86_400_000u64),
        1 => Just(86_400_001u64),
        2 => Just(u64::MAX),
        1 => Just(u64::MAX - 1),
        1 => any::<u64>(),
    ]
    .boxed()
}

/// Data: small, or around the 1 MiB limit.
fn emu_data() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        20 => bytes(16),
        1 => prop_oneof![Just(1_048_576usize), Just(1_048_577)].prop_map(|n| vec![7u8; n]),
    ]
    .boxed()
}

fn session_start() -> BoxedStrategy<session_request::SessionStart> {
    (
        prop_oneof![
            24 => Just(NODE.to_string()),
            1 => Just(String::new()),
            1 => Just("app".to_string()),
            1 => Just("/local/missing".to_string()),
            1 => ".{0,40}",
        ],
        prop_oneof![16 => Just(0u64), 2 => 1u64..6, 1 => any::<u64>()],
        prop_oneof![
            6 => 1_000u64..60_000,
            1 => 0u64..1_000,
            1 => Just(1_800_000u64),
            1 => Just(1_800_001u64),
            1 => Just(u64::MAX),
        ],
        prop_oneof![6 => Just(String::new()), 1 => (0usize..2_048).prop_map(|n| "d".repeat(n))],
        prop_oneof![3 => 0u64..4, 1 => any::<u64>()],
        prop_oneof![4 => Just(Vec::new()), 2 => bytes(17), 1 => bytes(64)],
    )
        .prop_map(
            |(path, session_id, timeout_millis, description, seq_no, protection_key)| {
                session_request::SessionStart {
                    path,
                    session_id,
                    timeout_millis,
                    description,
                    seq_no,
                    protection_key,
                }
            },
        )
        .boxed()
}

/// The requests a healthy session may send: semaphore operations and pings.
fn clean_request() -> BoxedStrategy<Rq> {
    use session_request as q;
    prop_oneof![
        1 => any::<u64>().prop_map(|opaque| Rq::Ping(q::PingPong { opaque })),
        8 => (emu_req_id(), emu_name(), emu_timeout(), emu_count(), emu_data(), any::<bool>())
            .prop_map(|(req_id, name, timeout_millis, count, data, ephemeral)| {
                Rq::AcquireSemaphore(q::AcquireSemaphore {
                    req_id,
                    name,
                    timeout_millis,
                    count,
                    data,
                    ephemeral,
                })
            }),
        5 => (emu_req_id(), emu_name())
            .prop_map(|(req_id, name)| Rq::ReleaseSemaphore(q::ReleaseSemaphore { req_id, name })),
        5 => (emu_req_id(), emu_name(), any::<[bool; 4]>()).prop_map(|(req_id, name, f)| {
            Rq::DescribeSemaphore(q::DescribeSemaphore {
                req_id,
                name,
                include_owners: f[0],
                include_waiters: f[1],
                watch_data: f[2],
                watch_owners: f[3],
            })
        }),
        4 => (emu_req_id(), emu_name(), emu_count(), emu_data())
            .prop_map(|(req_id, name, limit, data)| {
                Rq::CreateSemaphore(q::CreateSemaphore { req_id, name, limit, data })
            }),
        2 => (emu_req_id(), emu_name(), emu_data())
            .prop_map(|(req_id, name, data)| {
                Rq::UpdateSemaphore(q::UpdateSemaphore { req_id, name, data })
            }),
        2 => (emu_req_id(), emu_name(), any::<bool>())
            .prop_map(|(req_id, name, force)| {
                Rq::DeleteSemaphore(q::DeleteSemaphore { req_id, name, force })
            }),
    ]
    .boxed()
}

/// Requests that (usually) end the stream: pongs nobody asked for, a second start, a stop,
/// unsupported variants, the empty oneof.
fn ending_request() -> BoxedStrategy<SessionRequest> {
    use session_request as q;
    let r = prop_oneof![
        2 => prop_oneof![3 => Just(0u64), 1 => any::<u64>()]
            .prop_map(|opaque| Rq::Pong(q::PingPong { opaque })),
        1 => session_start().prop_map(Rq::SessionStart),
        2 => Just(Rq::SessionStop(q::SessionStop {})),
        1 => prop::sample::select(vec![5u8, 6, 13, 14, 15]).prop_map(|n| match n {
            5 => Rq::Unsupported5(Default::default()),
            6 => Rq::Unsupported6(Default::default()),
            13 => Rq::Unsupported13(Default::default()),
            14 => Rq::Unsupported14(Default::default()),
            _ => Rq::Unsupported15(Default::default()),
        }),
    ];
    prop_oneof![
        6 => r.prop_map(|r| SessionRequest { request: Some(r) }),
        1 => Just(SessionRequest { request: None }),
    ]
    .boxed()
}

/// Every `SessionRequest` variant, including the empty oneof.
fn request() -> BoxedStrategy<SessionRequest> {
    prop_oneof![
        6 => clean_request().prop_map(|r| SessionRequest { request: Some(r) }),
        1 => ending_request(),
    ]
    .boxed()
}

/// One thing a raw stream does.
#[derive(Debug, Clone)]
enum Item {
    Typed(SessionRequest),
    /// Arbitrary bytes as one gRPC message.
    Bytes(Vec<u8>),
    /// A well-formed request, then damaged: `(position, xor)` flips and a truncation.
    Mangled(SessionRequest, Vec<(usize, u8)>, Option<usize>),
    /// Lets time pass (the stream answers pings meanwhile).
    Sleep(u16),
}

fn sleep() -> BoxedStrategy<Item> {
    prop_oneof![Just(0u16), 1u16..100, 100u16..20_000]
        .prop_map(Item::Sleep)
        .boxed()
}

/// What a well-behaved client does (every field still arbitrary).
fn clean_item() -> BoxedStrategy<Item> {
    prop_oneof![
        6 => clean_request().prop_map(|r| Item::Typed(SessionRequest { request: Some(r) })),
        1 => sleep(),
    ]
    .boxed()
}

/// Anything at all, well-formed or not.
fn any_item() -> BoxedStrategy<Item> {
    prop_oneof![
        12 => request().prop_map(Item::Typed),
        2 => bytes(48).prop_map(Item::Bytes),
        2 => (request(), prop::collection::vec((any::<usize>(), 1u8..=255), 0..4), prop::option::of(any::<usize>()))
            .prop_map(|(r, flips, cut)| Item::Mangled(r, flips, cut)),
        2 => sleep(),
    ]
    .boxed()
}

fn item_bytes(item: &Item) -> Option<Vec<u8>> {
    match item {
        Item::Typed(r) => Some(prost::Message::encode_to_vec(r)),
        Item::Bytes(b) => Some(b.clone()),
        Item::Mangled(r, flips, cut) => {
            let mut b = prost::Message::encode_to_vec(r);
            if !b.is_empty() {
                for (pos, x) in flips {
                    let n = b.len();
                    b[pos % n] ^= x;
                }
            }
            if let Some(cut) = cut {
                let n = b.len() + 1;
                b.truncate(cut % n);
            }
            Some(b)
        }
        Item::Sleep(_) => None,
    }
}

/// One raw stream's script: usually a `session_start` first, then anything.
#[derive(Debug, Clone)]
struct StreamScript {
    start: Option<session_request::SessionStart>,
    /// Whether the stream answers the server's pings (else the server must end it).
    pongs: bool,
    items: Vec<Item>,
}

/// Half the streams behave, apart from the values they send and maybe one message that
/// ends them at the end; the other half send anything.
fn stream_script() -> BoxedStrategy<StreamScript> {
    let clean = (
        prop::collection::vec(clean_item(), 0..24),
        prop::option::weighted(0.3, any_item()),
    )
        .prop_map(|(mut items, last)| {
            items.extend(last);
            items
        });
    let hostile = prop::collection::vec(any_item(), 0..24);
    (
        prop::option::weighted(0.9, session_start()),
        prop::bool::weighted(0.9),
        prop_oneof![clean, hostile],
    )
        .prop_map(|(start, pongs, items)| StreamScript {
            start,
            pongs,
            items,
        })
        .boxed()
}

fn emu_case() -> BoxedStrategy<Vec<StreamScript>> {
    prop::collection::vec(stream_script(), 1..5).boxed()
}

/// Waits until `s` answers a ping with the given opaque (it keeps answering) or ends;
/// everything else it sends meanwhile is skipped.
async fn answers_or_ends(s: &mut Raw, opaque: u64) {
    if s.ended {
        return;
    }
    s.send(Rq::Ping(session_request::PingPong { opaque }));
    loop {
        match s.next_event(raw::GUARD).await {
            raw::Event::End { .. } => return,
            raw::Event::Msg { msg, .. } => {
                if let Some(Rs::Pong(p)) = msg.response
                    && p.opaque == opaque
                {
                    return;
                }
            }
        }
    }
}

async fn emu_case_run(scripts: Vec<StreamScript>) {
    let emu = raw::emulator().await;
    let ch = raw::channel(&emu).await;
    let mut streams: Vec<Raw> = scripts.iter().map(|_| Raw::open_bytes(&ch)).collect();
    for (s, script) in streams.iter().zip(&scripts) {
        s.set_auto_pong(script.pongs);
        if let Some(start) = &script.start {
            s.start_with(start.clone());
        }
    }
    // Round-robin: every stream's next item, then the next round.
    let rounds = scripts.iter().map(|s| s.items.len()).max().unwrap_or(0);
    for round in 0..rounds {
        for (s, script) in streams.iter().zip(&scripts) {
            let Some(item) = script.items.get(round) else {
                continue;
            };
            match item {
                Item::Sleep(ms) => tokio::time::sleep(Duration::from_millis(u64::from(*ms))).await,
                other => {
                    if let Some(b) = item_bytes(other) {
                        s.send_bytes(b);
                    }
                }
            }
        }
        tokio::task::yield_now().await;
    }
    // Every stream either still answers or has ended.
    for (i, s) in streams.iter_mut().enumerate() {
        answers_or_ends(s, 0x00F0_0D00 + i as u64).await;
    }
    // A half-closed stream is finished by the server.
    for (i, s) in streams.iter_mut().enumerate() {
        s.disconnect();
        assert!(
            s.wait_end(raw::GUARD).await.is_some(),
            "stream {i} did not end after the client half-closed it"
        );
    }
    drop(streams);
    // Nothing is left behind: every session expires (at most 30 minutes), ephemeral
    // semaphores go with their owners, and what remains is persistent and free.
    tokio::time::sleep(Duration::from_secs(31 * 60)).await;
    assert!(
        emu.session_ids(NODE).is_empty(),
        "sessions outlived their timeout: {:?}",
        emu.session_ids(NODE)
    );
    let names = emu.semaphore_names(NODE);
    if !names.is_empty() {
        let mut s = Raw::new_session(&ch, 30_000).await;
        for (i, name) in names.iter().enumerate() {
            let d = s.describe_ok(100 + i as u64, name).await;
            assert!(
                !d.ephemeral,
                "ephemeral semaphore {name:?} outlived every session"
            );
            assert!(d.owners.is_empty() && d.waiters.is_empty(), "{d:?}");
            assert_eq!(d.count, 0, "{d:?}");
        }
        s.close().await;
    }
    // And it still serves a brand-new session normally, on this connection and a new one.
    raw::assert_serves_fresh_session(&ch).await;
    let fresh = raw::channel(&emu).await;
    raw::assert_serves_fresh_session(&fresh).await;
}

proptest! {
    #![proptest_config(config(128))]

    /// Raw streams sending arbitrary requests and bytes, several at once: the emulator never
    /// panics, every stream ends or keeps answering, sessions and ephemeral semaphores do not
    /// outlive their timeouts, and a fresh session works afterwards.
    #[test]
    fn emulator_survives_arbitrary_client_messages(scripts in emu_case()) {
        run_case(emu_case_run(scripts));
    }
}

// ---- 3. the client under a flood of stray messages ----------------------------------------

/// Messages that answer nothing the client asked and must leave no trace: req_ids the
/// client never used, pings, pongs, empty and unsupported variants, a repeated
/// `session_started`.
fn stray() -> BoxedStrategy<Msg> {
    let far = (1_000_000u64..u64::MAX).prop_map(ReqId::Any);
    prop_oneof![
        Just(Msg::Empty),
        any::<u64>().prop_map(Msg::Ping),
        any::<u64>().prop_map(Msg::Pong),
        Just(Msg::Started(SID, 0)),
        prop::sample::select(vec![6u8, 7, 16, 17, 18]).prop_map(Msg::Unsupported),
        far.clone().prop_map(Msg::Pending),
        (far.clone(), status(), any::<bool>()).prop_map(|(r, s, a)| Msg::Acquire(
            r,
            s,
            Vec::new(),
            a
        )),
        (far.clone(), status(), any::<bool>()).prop_map(|(r, s, a)| Msg::Release(
            r,
            s,
            Vec::new(),
            a
        )),
        (far.clone(), status(), any::<bool>()).prop_map(|(r, s, w)| Msg::Describe(
            r,
            s,
            Vec::new(),
            None,
            w
        )),
        (far.clone(), any::<bool>(), any::<bool>()).prop_map(|(r, d, o)| Msg::Changed(r, d, o)),
        (far.clone(), status()).prop_map(|(r, s)| Msg::Create(r, s, Vec::new())),
        (far.clone(), status()).prop_map(|(r, s)| Msg::Update(r, s, Vec::new())),
        (far, status()).prop_map(|(r, s)| Msg::Delete(r, s, Vec::new())),
    ]
    .boxed()
}

async fn flood_run(kinds: Vec<Msg>, total: usize) {
    let mut peer = Peer::start().await;
    let (_client, session, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let mut script = Script {
        peer,
        current: i0,
        used: Vec::new(),
        seen: Vec::new(),
        answered: 0,
        reattach: VecDeque::new(),
        answer_stop: false,
        silent: false,
    };
    // One describe stays unanswered through the whole flood.
    let s = session.clone();
    let call =
        tokio::spawn(async move { s.describe_semaphore("kept", DescribeOptions::new()).await });
    let (_, r) = script.peer.recv().await;
    let Rq::DescribeSemaphore(kept) = r else {
        panic!("expected describe_semaphore, got {r:?}");
    };
    let mut pings = 0usize;
    for n in 0..total {
        let m = &kinds[n % kinds.len()];
        if matches!(m, Msg::Ping(_)) {
            pings += 1;
        }
        script.send(m);
        if n % 1_000 == 999 {
            script.peer.barrier(i0, 1 + n as u64).await;
        }
    }
    script.peer.barrier(i0, u64::MAX).await;
    assert!(
        !call.is_finished(),
        "a stray message completed the describe"
    );
    check_consistent(&session);
    assert_eq!(
        session.state(),
        SessionState::Attached { session_id: SID },
        "strays disturbed the session"
    );
    // Every server ping got exactly one pong (plus the barriers'), and the client asked for
    // nothing new.
    let mut pongs = 0usize;
    while let Some((i, r)) = script.peer.recv_any_within(Duration::ZERO).await {
        assert_eq!(i, i0);
        match r.request {
            Some(Rq::Pong(_)) => pongs += 1,
            Some(Rq::Ping(_)) => {}
            other => panic!("the client sent {other:?} during the flood"),
        }
    }
    assert_eq!(pongs, pings, "pongs for the server's pings");
    // After a reattach only the unanswered describe is sent again: strays left nothing in
    // the client's table of requests in flight.
    script.peer.end(i0);
    let (i1, _) = script.peer.accept_start(SID).await;
    let mut replayed = Vec::new();
    while let Some((i, r)) = script.peer.recv_within(Duration::from_secs(1)).await {
        assert_eq!(i, i1);
        replayed.push(r);
    }
    assert_eq!(replayed.len(), 1, "replayed after the flood: {replayed:?}");
    let Rq::DescribeSemaphore(again) = &replayed[0] else {
        panic!("expected the describe again, got {:?}", replayed[0]);
    };
    assert_eq!(again.name, kept.name);
    script.peer.send(
        i1,
        peer::describe_ok(again.req_id, peer::description("kept", b"")),
    );
    let got = tokio::time::timeout(peer::GUARD, call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.unwrap().name, "kept");
    session.close().await;
}

proptest! {
    #![proptest_config(config(6))]

    /// Tens of thousands of stray messages leave the session attached, get one pong per
    /// ping and nothing else, and leave nothing behind to replay.
    #[test]
    fn client_keeps_nothing_from_a_flood_of_strays(
        kinds in prop::collection::vec(stray(), 1..16),
        total in 5_000usize..30_000,
    ) {
        run_case(flood_run(kinds, total));
    }
}
