//! Unit tests of the node state machine: one test per core-level scenario of `SPEC.md` §9
//! (`emulator/SPEC.md`), asserting the exact effects (kinds, statuses, req_ids and order), plus
//! the edge cases of its sections 2-7. A `§` here is a section of `SPEC.md`.

use super::*;
use crate::proto::session_request::Request;
use crate::proto::session_response::Response;

const MINUTE: u64 = 60_000;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// A node plus a controllable clock. Streams are plain numbers chosen by each test.
struct Harness {
    node: NodeState,
    start: Instant,
    now: Instant,
}

impl Harness {
    fn new() -> Self {
        Self::with_config(NodeConfigProto::default())
    }

    fn with_config(config: NodeConfigProto) -> Self {
        let start = Instant::from_std(std::time::Instant::now());
        Harness {
            node: NodeState::new(config),
            start,
            now: start,
        }
    }

    /// Moves the clock to `ms` after the start of the test and fires due timers.
    fn at(&mut self, ms: u64) -> Vec<Effect> {
        self.now = self.start + Duration::from_millis(ms);
        self.node.advance(self.now)
    }

    fn attach_raw(&mut self, stream: StreamId, start: SessionStart) -> (Option<u64>, Vec<Effect>) {
        self.node.attach(self.now, stream, &start)
    }

    /// Starts a new session on `stream` and checks the reply.
    fn open(&mut self, stream: StreamId, timeout_millis: u64) -> u64 {
        let (id, effects) = self.attach_raw(stream, start(0, timeout_millis, 1, b""));
        let id = id.unwrap();
        assert_eq!(effects, vec![started(stream, id)]);
        id
    }

    fn req(&mut self, stream: StreamId, req: Request) -> Vec<Effect> {
        self.node.request(self.now, stream, req)
    }

    fn detach(&mut self, stream: StreamId) {
        assert_eq!(self.node.detach(self.now, stream), vec![]);
    }

    fn desc(&self, name: &str) -> SemaphoreDescriptionProto {
        self.node.describe(name).unwrap()
    }

    fn owners(&self, name: &str) -> Vec<(u64, u64)> {
        owners_of(&self.desc(name))
    }

    fn waiters(&self, name: &str) -> Vec<(u64, u64)> {
        self.desc(name)
            .waiters
            .iter()
            .map(|w| (w.session_id, w.count))
            .collect()
    }

    /// Creates a persistent semaphore and checks the reply.
    fn create(&mut self, stream: StreamId, name: &str, limit: u64) {
        let effects = self.req(stream, create(900, name, limit, b""));
        assert_eq!(effects, vec![create_res(stream, 900, Outcome::OK)]);
    }
}

/// `(session_id, count)` of every owner, sorted by session id (owner order is unspecified).
fn owners_of(desc: &SemaphoreDescriptionProto) -> Vec<(u64, u64)> {
    let mut owners: Vec<(u64, u64)> = desc
        .owners
        .iter()
        .map(|o| (o.session_id, o.count))
        .collect();
    owners.sort_unstable();
    owners
}

use crate::proto::session_request::SessionStart;

fn start(session_id: u64, timeout_millis: u64, seq_no: u64, key: &[u8]) -> SessionStart {
    SessionStart {
        path: "/local/node".into(),
        session_id,
        timeout_millis,
        description: "test".into(),
        seq_no,
        protection_key: key.to_vec(),
    }
}

fn acquire(req_id: u64, name: &str, count: u64, timeout_millis: u64) -> Request {
    Request::AcquireSemaphore(session_request::AcquireSemaphore {
        req_id,
        name: name.into(),
        timeout_millis,
        count,
        data: Vec::new(),
        ephemeral: false,
    })
}

fn acquire_data(req_id: u64, name: &str, count: u64, timeout_millis: u64, data: &[u8]) -> Request {
    Request::AcquireSemaphore(session_request::AcquireSemaphore {
        req_id,
        name: name.into(),
        timeout_millis,
        count,
        data: data.to_vec(),
        ephemeral: false,
    })
}

fn acquire_eph(req_id: u64, name: &str, count: u64, timeout_millis: u64) -> Request {
    Request::AcquireSemaphore(session_request::AcquireSemaphore {
        req_id,
        name: name.into(),
        timeout_millis,
        count,
        data: Vec::new(),
        ephemeral: true,
    })
}

fn release(req_id: u64, name: &str) -> Request {
    Request::ReleaseSemaphore(session_request::ReleaseSemaphore {
        req_id,
        name: name.into(),
    })
}

fn describe(req_id: u64, name: &str, watch_data: bool, watch_owners: bool) -> Request {
    Request::DescribeSemaphore(session_request::DescribeSemaphore {
        req_id,
        name: name.into(),
        include_owners: true,
        include_waiters: true,
        watch_data,
        watch_owners,
    })
}

fn create(req_id: u64, name: &str, limit: u64, data: &[u8]) -> Request {
    Request::CreateSemaphore(session_request::CreateSemaphore {
        req_id,
        name: name.into(),
        limit,
        data: data.to_vec(),
    })
}

fn update(req_id: u64, name: &str, data: &[u8]) -> Request {
    Request::UpdateSemaphore(session_request::UpdateSemaphore {
        req_id,
        name: name.into(),
        data: data.to_vec(),
    })
}

fn delete(req_id: u64, name: &str, force: bool) -> Request {
    Request::DeleteSemaphore(session_request::DeleteSemaphore {
        req_id,
        name: name.into(),
        force,
    })
}

fn stop() -> Request {
    Request::SessionStop(session_request::SessionStop {})
}

fn out(stream: StreamId, r: Response) -> Effect {
    Effect::Send(stream, proto::response(r))
}

fn err(status: StatusCode, reason: &'static str) -> Outcome {
    Outcome::err(status, reason)
}

fn started(stream: StreamId, session_id: u64) -> Effect {
    out(
        stream,
        Response::SessionStarted(session_response::SessionStarted {
            session_id,
            timeout_millis: 0,
        }),
    )
}

fn stopped(stream: StreamId, session_id: u64) -> Effect {
    out(
        stream,
        Response::SessionStopped(session_response::SessionStopped { session_id }),
    )
}

fn failure(stream: StreamId, status: StatusCode, reason: &str) -> Effect {
    Effect::Send(stream, proto::failure(status, reason))
}

fn close(stream: StreamId) -> Effect {
    Effect::Close(stream)
}

fn acq(stream: StreamId, req_id: u64, outcome: Outcome, acquired: bool) -> Effect {
    out(stream, acquire_result(req_id, outcome, acquired))
}

fn acquired(stream: StreamId, req_id: u64) -> Effect {
    acq(stream, req_id, Outcome::OK, true)
}

fn not_acquired(stream: StreamId, req_id: u64) -> Effect {
    acq(stream, req_id, Outcome::OK, false)
}

fn superseded(stream: StreamId, req_id: u64) -> Effect {
    acq(stream, req_id, err(StatusCode::Aborted, SUPERSEDED), false)
}

fn pending(stream: StreamId, req_id: u64) -> Effect {
    out(
        stream,
        Response::AcquireSemaphorePending(session_response::AcquireSemaphorePending { req_id }),
    )
}

fn released(stream: StreamId, req_id: u64, released: bool) -> Effect {
    out(stream, release_result(req_id, Outcome::OK, released))
}

fn notified(stream: StreamId, req_id: u64, data: bool, owners: bool) -> Effect {
    out(stream, changed(req_id, data, owners))
}

fn create_res(stream: StreamId, req_id: u64, outcome: Outcome) -> Effect {
    let (status, issues) = outcome.parts();
    out(
        stream,
        Response::CreateSemaphoreResult(session_response::CreateSemaphoreResult {
            req_id,
            status,
            issues,
        }),
    )
}

fn update_res(stream: StreamId, req_id: u64, outcome: Outcome) -> Effect {
    let (status, issues) = outcome.parts();
    out(
        stream,
        Response::UpdateSemaphoreResult(session_response::UpdateSemaphoreResult {
            req_id,
            status,
            issues,
        }),
    )
}

fn delete_res(stream: StreamId, req_id: u64, outcome: Outcome) -> Effect {
    let (status, issues) = outcome.parts();
    out(
        stream,
        Response::DeleteSemaphoreResult(session_response::DeleteSemaphoreResult {
            req_id,
            status,
            issues,
        }),
    )
}

/// Unpacks a single `describe_semaphore_result`.
fn describe_result(effects: &[Effect]) -> &session_response::DescribeSemaphoreResult {
    match effects {
        [
            Effect::Send(
                _,
                SessionResponse {
                    response: Some(Response::DescribeSemaphoreResult(r)),
                },
            ),
        ] => r,
        other => panic!("expected one describe result, got {other:?}"),
    }
}

fn describe_not_found(stream: StreamId, req_id: u64) -> Effect {
    let (status, issues) = err(StatusCode::NotFound, "Semaphore not found").parts();
    out(
        stream,
        Response::DescribeSemaphoreResult(session_response::DescribeSemaphoreResult {
            req_id,
            status,
            issues,
            semaphore_description: None,
            watch_added: false,
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// A. Stream / session protocol
// ---------------------------------------------------------------------------------------------

#[test]
fn new_sessions_get_consecutive_ids_from_one() {
    let mut h = Harness::new();
    assert_eq!(h.open(1, MINUTE), 1);
    assert_eq!(h.open(2, MINUTE), 2);
    assert_eq!(h.node.session_ids(), vec![1, 2]);
}

#[test]
fn reattach_to_unknown_session_is_session_expired() {
    let mut h = Harness::new();
    let (id, effects) = h.attach_raw(1, start(1, MINUTE, 1, b""));
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(1, StatusCode::SessionExpired, "Session does not exist"),
            close(1)
        ]
    );
    assert!(h.node.session_ids().is_empty());
}

#[test]
fn session_timeout_above_thirty_minutes_is_rejected_including_infinite() {
    let mut h = Harness::new();
    for timeout in [2 * 24 * 60 * MINUTE, 1_800_001, u64::MAX] {
        let (id, effects) = h.attach_raw(1, start(0, timeout, 1, b""));
        assert_eq!(id, None);
        assert_eq!(
            effects,
            vec![
                failure(1, StatusCode::BadRequest, "Session timeout is out of range"),
                close(1)
            ]
        );
    }
    // The bound itself is fine, and nothing was allocated by the failures.
    assert_eq!(h.open(2, 1_800_000), 1);
}

#[test]
fn oversized_description_or_protection_key_is_rejected() {
    let mut h = Harness::new();
    let mut s = start(0, MINUTE, 1, b"");
    s.description = "x".repeat(1025);
    let (id, effects) = h.attach_raw(1, s);
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(1, StatusCode::BadRequest, "Description is too large"),
            close(1)
        ]
    );
    let (id, effects) = h.attach_raw(2, start(0, MINUTE, 1, &[7; 17]));
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(2, StatusCode::BadRequest, "Protection key is too large"),
            close(2)
        ]
    );
    let mut s = start(0, MINUTE, 1, &[7; 16]);
    s.description = "x".repeat(1024);
    assert_eq!(h.attach_raw(3, s).0, Some(1));
}

#[test]
fn session_stop_answers_stopped_and_the_id_cannot_be_reattached() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    assert_eq!(h.req(1, stop()), vec![stopped(1, s1), close(1)]);
    assert!(h.node.session_ids().is_empty());
    assert_eq!(h.node.stream_session(1), None);
    let (id, effects) = h.attach_raw(2, start(s1, MINUTE, 2, b""));
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(2, StatusCode::SessionExpired, "Session does not exist"),
            close(2)
        ]
    );
    // A request on the stopped stream is refused as not attached (§2.7).
    assert_eq!(
        h.req(1, release(5, "x")),
        vec![
            failure(1, StatusCode::BadSession, "Session is not attached"),
            close(1)
        ]
    );
}

#[test]
fn reattach_after_disconnect_keeps_ownership() {
    let mut h = Harness::new();
    let s1 = h.open(1, 30_000);
    h.create(1, "Sem1", 5);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    h.detach(1);
    assert_eq!(
        h.node.session_expiry(s1),
        Some(h.now + Duration::from_millis(30_000))
    );
    h.at(10_000);
    let (id, effects) = h.attach_raw(2, start(s1, 30_000, 2, b""));
    assert_eq!(id, Some(s1));
    assert_eq!(effects, vec![started(2, s1)]);
    assert_eq!(h.node.session_expiry(s1), None);
    assert_eq!(h.node.next_deadline(), None);
    assert_eq!(h.owners("Sem1"), vec![(s1, 1)]);
    // The session stays alive long after the old deadline while attached.
    assert_eq!(h.at(10 * MINUTE), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1]);
}

#[test]
fn stealing_with_equal_or_higher_seq_no_evicts_each_predecessor() {
    let mut h = Harness::new();
    let (id, _) = h.attach_raw(1, start(0, MINUTE, 5, b""));
    let s1 = id.unwrap();
    // Equal seq_no is accepted.
    let (id, effects) = h.attach_raw(2, start(s1, MINUTE, 5, b""));
    assert_eq!(id, Some(s1));
    assert_eq!(
        effects,
        vec![
            started(2, s1),
            failure(
                1,
                StatusCode::BadSession,
                "Session stolen by another remote client"
            ),
            close(1)
        ]
    );
    let (id, effects) = h.attach_raw(3, start(s1, MINUTE, 6, b""));
    assert_eq!(id, Some(s1));
    assert_eq!(
        effects,
        vec![
            started(3, s1),
            failure(
                2,
                StatusCode::BadSession,
                "Session stolen by another remote client"
            ),
            close(2)
        ]
    );
    // The evicted streams are no longer bound; their late detach changes nothing.
    h.detach(1);
    h.detach(2);
    assert_eq!(h.node.session_stream(s1), Some(3));
    assert_eq!(h.node.next_deadline(), None);
}

#[test]
fn rejected_steal_leaves_the_old_stream_and_semaphores_alone() {
    let mut h = Harness::new();
    let (id, _) = h.attach_raw(1, start(0, MINUTE, 5, b"key"));
    let s1 = id.unwrap();
    h.create(1, "Sem1", 1);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    let (id, effects) = h.attach_raw(2, start(s1, MINUTE, 4, b"key"));
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(
                2,
                StatusCode::BadSession,
                "Attach request is out of sequence"
            ),
            close(2)
        ]
    );
    let (id, effects) = h.attach_raw(3, start(s1, MINUTE, 9, b"other"));
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(
                3,
                StatusCode::BadSession,
                "Attach request protection key mismatch"
            ),
            close(3)
        ]
    );
    let (id, effects) = h.attach_raw(4, start(s1, MINUTE, 9, b""));
    assert_eq!(id, None);
    assert_eq!(effects.len(), 2);
    assert_eq!(h.node.session_stream(s1), Some(1));
    assert_eq!(h.owners("Sem1"), vec![(s1, 1)]);
}

#[test]
fn session_created_with_empty_key_accepts_any_key() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let (id, effects) = h.attach_raw(2, start(s1, MINUTE, 2, b"foobar"));
    assert_eq!(id, Some(s1));
    assert_eq!(effects.first(), Some(&started(2, s1)));
    // The key is never updated by a reattach: still anything goes.
    let (id, _) = h.attach_raw(3, start(s1, MINUTE, 3, b"other"));
    assert_eq!(id, Some(s1));
}

#[test]
fn session_created_with_a_key_accepts_the_same_key() {
    let mut h = Harness::new();
    let (id, _) = h.attach_raw(1, start(0, MINUTE, 1, b"foobar"));
    let s1 = id.unwrap();
    let (id, effects) = h.attach_raw(2, start(s1, MINUTE, 2, b"foobar"));
    assert_eq!(id, Some(s1));
    assert_eq!(
        effects,
        vec![
            started(2, s1),
            failure(
                1,
                StatusCode::BadSession,
                "Session stolen by another remote client"
            ),
            close(1)
        ]
    );
}

#[test]
fn detached_session_expires_exactly_after_its_timeout() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.detach(1);
    assert_eq!(h.at(59_900), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1]);
    assert_eq!(h.at(60_000), vec![], "fires silently: nobody is attached");
    assert!(h.node.session_ids().is_empty());
    let (id, effects) = h.attach_raw(2, start(s1, MINUTE, 2, b""));
    assert_eq!(id, None);
    assert_eq!(
        effects,
        vec![
            failure(2, StatusCode::SessionExpired, "Session does not exist"),
            close(2)
        ]
    );
}

#[test]
fn reattach_just_before_expiry_cancels_it_and_replaces_the_timeout() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.detach(1);
    h.at(59_900);
    let (id, _) = h.attach_raw(2, start(s1, 1_000, 2, b""));
    assert_eq!(id, Some(s1));
    assert_eq!(h.at(61_000), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1]);
    // The new, shorter timeout applies to the next detach.
    h.detach(2);
    assert_eq!(h.at(61_999), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1]);
    h.at(62_000);
    assert!(h.node.session_ids().is_empty());
}

#[test]
fn restart_gives_detached_sessions_timeout_plus_grace_and_forgets_seq_no() {
    let mut h = Harness::new();
    assert_eq!(h.node.grace_period(), Duration::from_millis(10_000));
    let (id, _) = h.attach_raw(1, start(0, MINUTE, 7, b""));
    let s1 = id.unwrap();
    let s2 = h.open(2, 30_000);
    h.detach(2);
    assert_eq!(
        h.node.restart(h.now),
        vec![
            failure(1, StatusCode::Unavailable, "Link failure"),
            close(1)
        ]
    );
    assert_eq!(h.node.stream_session(1), None);
    h.detach(1);
    // s2 was already detached: its clock restarts too.
    assert_eq!(h.at(39_999), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1, s2]);
    h.at(40_000);
    assert_eq!(h.node.session_ids(), vec![s1]);
    assert_eq!(h.at(70_000 - 1), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1]);
    // Any seq_no reattaches after a restart (LastOwnerSeqNo was reset).
    let (id, effects) = h.attach_raw(3, start(s1, MINUTE, 0, b""));
    assert_eq!(id, Some(s1));
    assert_eq!(effects, vec![started(3, s1)]);
    assert_eq!(h.at(80_000), vec![]);
    assert_eq!(h.node.session_ids(), vec![s1]);
}

#[test]
fn restart_session_expires_at_seventy_seconds() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.node.restart(h.now);
    h.at(70_000 - 1);
    assert_eq!(h.node.session_ids(), vec![s1]);
    h.at(70_000);
    assert!(h.node.session_ids().is_empty());
}

#[test]
fn grace_period_follows_the_config_formula() {
    let cfg = |self_check: u32, grace: u32| NodeConfigProto {
        self_check_period_millis: self_check,
        session_grace_period_millis: grace,
        ..NodeConfigProto::default()
    };
    let g = |c| NodeState::new(c).grace_period().as_millis();
    assert_eq!(g(cfg(0, 0)), 10_000);
    assert_eq!(g(cfg(1_000, 5_000)), 5_000);
    assert_eq!(g(cfg(100, 100)), 1_500);
    assert_eq!(g(cfg(60_000, 100)), 11_000);
    assert_eq!(g(cfg(1_000, 3_600_000)), 30_000);
}

#[test]
fn alter_merges_only_set_fields_and_stored_config_keeps_zeroes() {
    let mut node = NodeState::new(NodeConfigProto {
        self_check_period_millis: 1234,
        ..NodeConfigProto::default()
    });
    node.alter(&NodeConfigProto {
        session_grace_period_millis: 5678,
        ..NodeConfigProto::default()
    });
    assert_eq!(node.stored_config().self_check_period_millis, 1234);
    assert_eq!(node.stored_config().session_grace_period_millis, 5678);
    node.alter(&NodeConfigProto {
        self_check_period_millis: 2345,
        read_consistency_mode: 1,
        ..NodeConfigProto::default()
    });
    let c = node.stored_config();
    assert_eq!(
        (
            c.self_check_period_millis,
            c.session_grace_period_millis,
            c.read_consistency_mode,
            c.attach_consistency_mode
        ),
        (2345, 5678, 1, 0)
    );
}

#[test]
fn misplaced_requests_end_the_stream_with_bad_request_and_detach() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    assert_eq!(
        h.req(1, Request::Unsupported5(Default::default())),
        vec![
            failure(1, StatusCode::BadRequest, "Unimplemented request"),
            close(1)
        ]
    );
    assert_eq!(h.node.session_stream(s1), None);
    assert!(h.node.session_expiry(s1).is_some());
    let (_, _) = h.attach_raw(2, start(s1, MINUTE, 2, b""));
    assert_eq!(
        h.req(2, Request::SessionStart(start(s1, MINUTE, 3, b""))),
        vec![
            failure(2, StatusCode::BadRequest, "Session cannot be started twice"),
            close(2)
        ]
    );
}

#[test]
fn requests_on_unknown_streams_are_not_attached() {
    let mut h = Harness::new();
    assert_eq!(
        h.req(42, create(1, "Sem1", 1, b"")),
        vec![
            failure(42, StatusCode::BadSession, "Session is not attached"),
            close(42)
        ]
    );
    assert!(h.node.semaphore_names().is_empty());
    assert_eq!(h.node.detach(h.now, 42), vec![]);
}

#[test]
fn expire_session_deletes_now_and_tells_a_bound_stream_last() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, MINUTE)), vec![pending(2, 2)]);
    let (found, effects) = h.node.expire_session(h.now, s1);
    assert!(found);
    assert_eq!(
        effects,
        vec![
            acquired(2, 2),
            failure(1, StatusCode::SessionExpired, "Session has expired"),
            close(1)
        ]
    );
    assert_eq!(h.owners("Sem1"), vec![(s2, 1)]);
    assert_eq!(h.node.expire_session(h.now, s1), (false, vec![]));
}

#[test]
fn shutdown_fails_every_bound_stream() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.detach(2);
    assert_eq!(
        h.node.shutdown(),
        vec![
            failure(1, StatusCode::Unavailable, "Link failure"),
            close(1)
        ]
    );
    assert_eq!(h.node.stream_session(1), None);
}

// ---------------------------------------------------------------------------------------------
// B. Semaphore CRUD
// ---------------------------------------------------------------------------------------------

#[test]
fn create_validates_limit_and_rejects_duplicates() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    assert_eq!(
        h.req(1, create(1, "Sem1", 0, b"")),
        vec![create_res(
            1,
            1,
            err(StatusCode::BadRequest, "Semaphores must have limit > 0")
        )]
    );
    assert_eq!(
        h.req(1, create(2, "Sem1", 42, b"")),
        vec![create_res(1, 2, Outcome::OK)]
    );
    for (req_id, limit) in [(3, 42), (4, 51)] {
        assert_eq!(
            h.req(1, create(req_id, "Sem1", limit, b"x")),
            vec![create_res(
                1,
                req_id,
                err(StatusCode::AlreadyExists, "Semaphore already exists")
            )]
        );
    }
    let d = h.desc("Sem1");
    assert_eq!(
        (d.limit, d.data.as_slice(), d.ephemeral),
        (42, &b""[..], false)
    );
    assert_eq!(
        h.req(1, describe(5, "Sem2", false, false)),
        vec![describe_not_found(1, 5)]
    );
    assert_eq!(
        h.req(1, create(6, "Max", u64::MAX, b"")),
        vec![create_res(1, 6, Outcome::OK)]
    );
}

#[test]
fn create_over_an_ephemeral_semaphore_is_precondition_failed() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    assert_eq!(
        h.req(1, acquire_eph(1, "Lock1", 1, 0)),
        vec![acquired(1, 1)]
    );
    for limit in [1, 100] {
        assert_eq!(
            h.req(1, create(2, "Lock1", limit, b"")),
            vec![create_res(
                1,
                2,
                err(
                    StatusCode::PreconditionFailed,
                    "Cannot create semaphore due to ephemeral locks"
                )
            )]
        );
    }
    assert!(h.desc("Lock1").ephemeral);
}

#[test]
fn delete_rules_for_ephemeral_missing_and_empty_semaphores() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    assert_eq!(
        h.req(1, acquire_eph(1, "Lock1", 1, 0)),
        vec![acquired(1, 1)]
    );
    for force in [false, true] {
        assert_eq!(
            h.req(1, delete(2, "Lock1", force)),
            vec![delete_res(
                1,
                2,
                err(
                    StatusCode::PreconditionFailed,
                    "Cannot delete ephemeral semaphores"
                )
            )]
        );
    }
    let not_found = err(StatusCode::NotFound, "Semaphore does not exist");
    assert_eq!(
        h.req(1, delete(3, "Sem1", false)),
        vec![delete_res(1, 3, not_found)]
    );
    h.create(1, "Sem1", 1);
    assert_eq!(
        h.req(1, delete(4, "Sem1", false)),
        vec![delete_res(1, 4, Outcome::OK)]
    );
    assert_eq!(
        h.req(1, delete(5, "Sem1", false)),
        vec![delete_res(1, 5, not_found)]
    );
    assert_eq!(h.node.semaphore_names(), vec!["Lock1".to_string()]);
}

#[test]
fn semaphore_data_round_trips_and_duplicates_do_not_modify() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    assert_eq!(
        h.req(1, create(1, "Sem1", 1, b"")),
        vec![create_res(1, 1, Outcome::OK)]
    );
    assert_eq!(
        h.req(1, create(2, "Sem2", 1, &[0x81, 0x82, 0x83, 0x84])),
        vec![create_res(1, 2, Outcome::OK)]
    );
    assert_eq!(h.desc("Sem1").data, b"");
    assert_eq!(h.desc("Sem2").data, vec![0x81, 0x82, 0x83, 0x84]);
    h.req(1, create(3, "Sem2", 7, b"other"));
    assert_eq!(h.desc("Sem2").data, vec![0x81, 0x82, 0x83, 0x84]);
    assert_eq!(h.desc("Sem2").limit, 1);
    assert_eq!(
        h.req(1, update(4, "Sem1", b"one")),
        vec![update_res(1, 4, Outcome::OK)]
    );
    assert_eq!(
        h.req(1, update(5, "Sem2", b"two")),
        vec![update_res(1, 5, Outcome::OK)]
    );
    assert_eq!(h.desc("Sem1").data, b"one");
    assert_eq!(h.desc("Sem2").data, b"two");
    assert_eq!(
        h.req(1, update(6, "Sem3", b"x")),
        vec![update_res(
            1,
            6,
            err(StatusCode::NotFound, "Semaphore does not exist")
        )]
    );
    // Persists across a restart.
    h.node.restart(h.now);
    assert_eq!(h.desc("Sem2").data, b"two");
}

#[test]
fn name_and_data_limits_apply_to_create_and_update_only() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let long = "n".repeat(1025);
    let name_too_long = err(StatusCode::BadRequest, "Semaphore name is too long");
    assert_eq!(
        h.req(1, create(1, &long, 1, b"")),
        vec![create_res(1, 1, name_too_long)]
    );
    assert_eq!(
        h.req(1, update(2, &long, b"")),
        vec![update_res(1, 2, name_too_long)]
    );
    let big = vec![0u8; MAX_SEMAPHORE_DATA + 1];
    let data_too_large = err(StatusCode::BadRequest, "Semaphore data is too large");
    assert_eq!(
        h.req(1, create(3, "Sem1", 1, &big)),
        vec![create_res(1, 3, data_too_large)]
    );
    assert_eq!(
        h.req(1, create(4, "Sem1", 1, &big[1..])),
        vec![create_res(1, 4, Outcome::OK)]
    );
    // Oversized update data is rejected without being applied.
    assert_eq!(
        h.req(1, update(5, "Sem1", &big)),
        vec![update_res(1, 5, data_too_large)]
    );
    assert_eq!(h.desc("Sem1").data.len(), MAX_SEMAPHORE_DATA);
    // Acquire does not check the name length.
    let eph = "e".repeat(2000);
    assert_eq!(h.req(1, acquire_eph(6, &eph, 1, 0)), vec![acquired(1, 6)]);
    assert!(h.desc(&eph).ephemeral);
    // Names are otherwise unrestricted.
    h.create(1, "", 1);
    h.create(1, "/foo/bar", 1);
}

#[test]
fn deleting_a_busy_semaphore_needs_force_and_aborts_waiters_only() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, MINUTE)), vec![pending(2, 2)]);
    assert_eq!(
        h.req(1, delete(3, "Sem1", false)),
        vec![delete_res(
            1,
            3,
            err(StatusCode::PreconditionFailed, "Semaphore not empty")
        )]
    );
    assert_eq!(h.owners("Sem1"), vec![(s1, 1)]);
    assert_eq!(
        h.req(1, delete(4, "Sem1", true)),
        vec![
            acq(2, 2, err(StatusCode::Aborted, "Semaphore destroyed"), false),
            delete_res(1, 4, Outcome::OK)
        ]
    );
    assert_eq!(
        h.req(1, describe(5, "Sem1", false, false)),
        vec![describe_not_found(1, 5)]
    );
    // The waiter's timer went with it.
    assert_eq!(h.node.next_deadline(), None);
    // Both sessions can use the name again from scratch.
    h.create(1, "Sem1", 1);
    assert_eq!(h.req(2, acquire(6, "Sem1", 1, 0)), vec![acquired(2, 6)]);
}

// ---------------------------------------------------------------------------------------------
// C. Acquire / release
// ---------------------------------------------------------------------------------------------

#[test]
fn acquire_validation_in_order() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let bad = |req_id, status, reason| acq(1, req_id, err(status, reason), false);
    assert_eq!(
        h.req(1, acquire(1, "Sem1", 1, 0)),
        vec![bad(1, StatusCode::NotFound, "Semaphore does not exist")]
    );
    h.create(1, "Sem1", 1);
    assert_eq!(
        h.req(1, acquire(2, "Sem1", 0, 0)),
        vec![bad(
            2,
            StatusCode::BadRequest,
            "Acquire must have count > 0"
        )]
    );
    assert_eq!(
        h.req(1, acquire(3, "Sem1", 100_500, 0)),
        vec![bad(
            3,
            StatusCode::BadRequest,
            "Cannot acquire more than allowed by the semaphore"
        )]
    );
    assert_eq!(
        h.req(1, acquire(4, "Sem1", 1, 2 * 24 * 60 * MINUTE)),
        vec![bad(
            4,
            StatusCode::BadRequest,
            "Acquire timeout is out of range"
        )]
    );
    assert_eq!(
        h.req(1, acquire_eph(5, "Sem1", 1, 0)),
        vec![bad(
            5,
            StatusCode::PreconditionFailed,
            "Semaphore ephemeral mode mismatch"
        )]
    );
    assert_eq!(
        h.req(
            1,
            acquire_data(6, "Sem1", 1, 0, &vec![0; MAX_SEMAPHORE_DATA + 1])
        ),
        vec![bad(6, StatusCode::BadRequest, "Acquire data is too large")]
    );
    // Stateless checks come before the existence check.
    assert_eq!(
        h.req(1, acquire(7, "Missing", 0, 0)),
        vec![bad(
            7,
            StatusCode::BadRequest,
            "Acquire must have count > 0"
        )]
    );
    // A 1-day and an infinite timeout are both fine.
    assert_eq!(
        h.req(1, acquire(8, "Sem1", 1, 24 * 60 * MINUTE)),
        vec![acquired(1, 8)]
    );
    assert_eq!(
        h.req(1, acquire(9, "Sem1", 1, u64::MAX)),
        vec![acquired(1, 9)]
    );
    assert_eq!(h.desc("Sem1").owners.len(), 1);
}

#[test]
fn immediate_acquire_sends_no_pending_and_blocked_one_waits() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, MINUTE)), vec![pending(2, 2)]);
    assert_eq!(h.owners("Sem1"), vec![(s1, 1)]);
    let d = h.desc("Sem1");
    assert_eq!(d.waiters.len(), 1);
    let w = &d.waiters[0];
    assert_eq!((w.session_id, w.count, w.timeout_millis), (s2, 1, MINUTE));
    assert_eq!((d.owners[0].order_id, w.order_id), (1, 2));
    assert_eq!(d.owners[0].timeout_millis, 0);
}

#[test]
fn waiter_timeout_answers_success_not_acquired() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, MINUTE)), vec![pending(2, 2)]);
    assert_eq!(
        h.node.next_deadline(),
        Some(h.start + Duration::from_millis(MINUTE))
    );
    assert_eq!(h.at(59_999), vec![]);
    assert_eq!(h.at(60_001), vec![not_acquired(2, 2)]);
    assert!(h.waiters("Sem1").is_empty());
    assert_eq!(h.owners("Sem1"), vec![(s1, 1)]);
    assert_eq!(h.node.next_deadline(), None);
}

#[test]
fn waiters_time_out_independently_in_deadline_order() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.open(3, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, 60_000)), vec![pending(2, 2)]);
    assert_eq!(h.req(3, acquire(3, "Sem1", 1, 30_000)), vec![pending(3, 3)]);
    assert_eq!(h.at(100_000), vec![not_acquired(3, 3), not_acquired(2, 2)]);
}

#[test]
fn infinite_wait_has_no_timer_and_is_promoted_on_release() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    assert_eq!(
        h.req(2, acquire(2, "Sem1", 1, u64::MAX)),
        vec![pending(2, 2)]
    );
    assert_eq!(h.node.next_deadline(), None);
    assert_eq!(h.at(24 * 60 * MINUTE), vec![]);
    assert_eq!(h.desc("Sem1").waiters[0].timeout_millis, u64::MAX);
    assert_eq!(
        h.req(1, release(3, "Sem1")),
        vec![released(1, 3, true), acquired(2, 2)]
    );
    assert_eq!(h.owners("Sem1"), vec![(s2, 1)]);
}

#[test]
fn releasing_promotes_waiters_of_every_semaphore() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.create(1, "Sem2", 1);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(1, acquire(2, "Sem2", 1, 0)), vec![acquired(1, 2)]);
    assert_eq!(h.req(2, acquire(3, "Sem1", 1, MINUTE)), vec![pending(2, 3)]);
    assert_eq!(h.req(2, acquire(4, "Sem2", 1, MINUTE)), vec![pending(2, 4)]);
    assert_eq!(
        h.req(1, release(5, "Sem1")),
        vec![released(1, 5, true), acquired(2, 3)]
    );
    assert_eq!(
        h.req(1, release(6, "Sem2")),
        vec![released(1, 6, true), acquired(2, 4)]
    );
    assert_eq!(h.owners("Sem1"), vec![(s2, 1)]);
    assert_eq!(h.owners("Sem2"), vec![(s2, 1)]);
    assert_eq!(h.node.next_deadline(), None);
    let _ = s1;
}

#[test]
fn session_expiry_promotes_waiters_only_when_the_timeout_passes() {
    let mut h = Harness::new();
    let s1 = h.open(1, 30_000);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.create(1, "Sem2", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    h.req(1, acquire(2, "Sem2", 1, 0));
    assert_eq!(h.req(2, acquire(3, "Sem1", 1, MINUTE)), vec![pending(2, 3)]);
    assert_eq!(h.req(2, acquire(4, "Sem2", 1, MINUTE)), vec![pending(2, 4)]);
    h.detach(1);
    assert_eq!(h.at(29_999), vec![]);
    assert_eq!(h.owners("Sem1"), vec![(s1, 1)]);
    assert_eq!(h.at(30_000), vec![acquired(2, 3), acquired(2, 4)]);
    assert_eq!(h.owners("Sem1"), vec![(s2, 1)]);
    assert_eq!(h.owners("Sem2"), vec![(s2, 1)]);
    assert_eq!(h.node.session_ids(), vec![s2]);
}

#[test]
fn fifo_queue_is_strict_for_shared_and_exclusive_waiters() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.open(2, MINUTE);
    let s3 = h.open(3, MINUTE);
    assert_eq!(
        h.req(1, acquire_eph(1, "Lock1", 1, 0)),
        vec![acquired(1, 1)]
    );
    assert_eq!(
        h.req(2, acquire_eph(2, "Lock1", u64::MAX, MINUTE)),
        vec![pending(2, 2)]
    );
    // Shared would fit, but never bypasses the blocked exclusive waiter.
    assert_eq!(
        h.req(3, acquire_eph(3, "Lock1", 1, MINUTE)),
        vec![pending(3, 3)]
    );
    assert_eq!(
        h.req(2, stop()),
        vec![acquired(3, 3), stopped(2, 2), close(2)]
    );
    assert_eq!(h.owners("Lock1"), vec![(s1, 1), (s3, 1)]);
    assert!(h.waiters("Lock1").is_empty());
}

#[test]
fn smaller_later_waiter_does_not_bypass_a_blocked_head() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let a = h.open(2, MINUTE);
    let b = h.open(3, MINUTE);
    h.create(1, "Sem1", 3);
    assert_eq!(h.req(1, acquire(1, "Sem1", 2, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(2, acquire(2, "Sem1", 2, 10_000)), vec![pending(2, 2)]);
    assert_eq!(h.req(3, acquire(3, "Sem1", 1, MINUTE)), vec![pending(3, 3)]);
    // Try-lock fails whenever anyone is queued, although a token is free.
    assert_eq!(h.req(1, release(4, "Other")), vec![released(1, 4, false)]);
    let s4 = h.open(4, MINUTE);
    assert_eq!(h.req(4, acquire(5, "Sem1", 1, 0)), vec![not_acquired(4, 5)]);
    assert_eq!(h.waiters("Sem1"), vec![(a, 2), (b, 1)]);
    // The blocked head times out, which lets the smaller waiter through.
    assert_eq!(h.at(10_000), vec![not_acquired(2, 2), acquired(3, 3)]);
    let _ = s4;
}

#[test]
fn owner_can_repeat_and_downgrade_but_not_upgrade() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    assert_eq!(
        h.req(1, acquire_eph(1, "Lock1", u64::MAX, 0)),
        vec![acquired(1, 1)]
    );
    assert_eq!(
        h.req(1, acquire_eph(2, "Lock1", u64::MAX, 0)),
        vec![acquired(1, 2)]
    );
    assert_eq!(
        h.req(1, acquire_eph(3, "Lock1", 1, 0)),
        vec![acquired(1, 3)]
    );
    assert_eq!(h.owners("Lock1"), vec![(s1, 1)]);
    assert_eq!(
        h.req(1, acquire_eph(4, "Lock1", u64::MAX, 0)),
        vec![acq(
            1,
            4,
            err(StatusCode::BadRequest, "Increasing count is not allowed"),
            false
        )]
    );
    let d = h.desc("Lock1");
    assert_eq!((d.count, d.owners[0].order_id), (1, 1));
}

#[test]
fn owner_downgrade_lets_waiters_in() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.req(1, acquire_eph(1, "Lock1", u64::MAX, 0));
    assert_eq!(
        h.req(2, acquire_eph(2, "Lock1", 1, MINUTE)),
        vec![pending(2, 2)]
    );
    assert_eq!(
        h.req(1, acquire_eph(3, "Lock1", 1, 0)),
        vec![acquired(1, 3), acquired(2, 2)]
    );
    assert_eq!(h.owners("Lock1"), vec![(s1, 1), (s2, 1)]);
    assert!(h.waiters("Lock1").is_empty());
}

#[test]
fn waiter_downgrade_aborts_the_first_request_and_acquires() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.req(1, acquire_eph(1, "Lock1", 1, 0));
    assert_eq!(
        h.req(2, acquire_eph(2, "Lock1", u64::MAX, 30_000)),
        vec![pending(2, 2)]
    );
    // Re-sending the same acquire aborts the first request and waits again.
    assert_eq!(
        h.req(2, acquire_eph(3, "Lock1", u64::MAX, 30_000)),
        vec![superseded(2, 2), pending(2, 3)]
    );
    assert_eq!(
        h.req(2, acquire_eph(4, "Lock1", 1, 30_000)),
        vec![superseded(2, 3), acquired(2, 4)]
    );
    let d = h.desc("Lock1");
    assert_eq!(owners_of(&d), vec![(1, 1), (s2, 1)]);
    // Queue position kept: the order_id of the first acquire.
    assert_eq!(
        d.owners.iter().map(|o| o.order_id).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn waiter_cannot_increase_its_count() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 5);
    h.req(1, acquire(1, "Sem1", 5, 0));
    assert_eq!(h.req(2, acquire(2, "Sem1", 2, MINUTE)), vec![pending(2, 2)]);
    assert_eq!(
        h.req(2, acquire(3, "Sem1", 3, MINUTE)),
        vec![acq(
            2,
            3,
            err(StatusCode::BadRequest, "Increasing count is not allowed"),
            false
        )]
    );
    // The old request is still associated and gets the result.
    assert_eq!(
        h.req(1, release(4, "Sem1")),
        vec![released(1, 4, true), acquired(2, 2)]
    );
}

#[test]
fn waiter_reacquire_with_zero_timeout_gives_up_unless_it_would_win() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.open(3, MINUTE);
    h.create(1, "Sem1", 2);
    h.req(1, acquire(1, "Sem1", 2, 0));
    assert_eq!(h.req(2, acquire(2, "Sem1", 2, MINUTE)), vec![pending(2, 2)]);
    assert_eq!(h.req(3, acquire(3, "Sem1", 1, MINUTE)), vec![pending(3, 3)]);
    // Head, but it does not fit: folded into "not acquired", removed from the queue.
    assert_eq!(
        h.req(2, acquire(4, "Sem1", 2, 0)),
        vec![superseded(2, 2), not_acquired(2, 4)]
    );
    assert_eq!(h.waiters("Sem1"), vec![(3, 1)]);
    // Timer of the removed waiter is gone; the remaining one is still armed.
    assert_eq!(h.at(MINUTE), vec![not_acquired(3, 3)]);
}

#[test]
fn releasing_a_pending_acquire_aborts_it_before_the_release_result() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.req(1, acquire_eph(1, "Lock1", u64::MAX, 0));
    assert_eq!(
        h.req(2, acquire_eph(2, "Lock1", u64::MAX, MINUTE)),
        vec![pending(2, 2)]
    );
    assert_eq!(
        h.req(2, release(3, "Lock1")),
        vec![superseded(2, 2), released(2, 3, true)]
    );
    assert!(h.waiters("Lock1").is_empty());
    assert_eq!(h.node.next_deadline(), None);
    // Release-then-reacquire: waits again and is promoted by the owner's release.
    assert_eq!(
        h.req(2, acquire_eph(4, "Lock1", u64::MAX, 10_000)),
        vec![pending(2, 4)]
    );
    assert_eq!(
        h.req(1, release(5, "Lock1")),
        vec![released(1, 5, true), acquired(2, 4)]
    );
    assert_eq!(h.owners("Lock1"), vec![(s2, u64::MAX)]);
    // Releasing what one does not hold (or a missing semaphore) is SUCCESS released=false.
    assert_eq!(h.req(1, release(6, "Lock1")), vec![released(1, 6, false)]);
    assert_eq!(h.req(1, release(7, "Nope")), vec![released(1, 7, false)]);
    let _ = s1;
}

#[test]
fn session_stop_frees_its_semaphores_at_once() {
    let mut h = Harness::new();
    let s1 = h.open(1, 30_000);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 5);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(2, acquire(2, "Sem1", 5, 100)), vec![pending(2, 2)]);
    assert_eq!(h.at(100), vec![not_acquired(2, 2)]);
    assert_eq!(h.req(1, stop()), vec![stopped(1, s1), close(1)]);
    assert_eq!(h.req(2, acquire(3, "Sem1", 5, 5_000)), vec![acquired(2, 3)]);
    assert_eq!(h.owners("Sem1"), vec![(s2, 5)]);
}

#[test]
fn ephemeral_semaphore_lives_while_it_has_owners() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    assert_eq!(
        h.req(1, acquire_eph(1, "Lock1", 1, 0)),
        vec![acquired(1, 1)]
    );
    let r = h.req(1, describe(2, "Lock1", false, false));
    let d = describe_result(&r).semaphore_description.clone().unwrap();
    assert!(d.ephemeral);
    assert_eq!(d.limit, u64::MAX);
    assert_eq!(owners_of(&d), vec![(s1, 1)]);
    assert_eq!(h.req(1, stop()), vec![stopped(1, s1), close(1)]);
    h.open(2, MINUTE);
    assert_eq!(
        h.req(2, describe(3, "Lock1", false, false)),
        vec![describe_not_found(2, 3)]
    );
    assert!(h.node.semaphore_names().is_empty());
}

#[test]
fn ephemeral_semaphore_is_deleted_by_the_last_release() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.req(1, acquire_eph(1, "Lock1", 1, 0));
    h.req(2, acquire_eph(2, "Lock1", 1, 0));
    assert_eq!(h.req(1, release(3, "Lock1")), vec![released(1, 3, true)]);
    assert_eq!(h.node.semaphore_names(), vec!["Lock1".to_string()]);
    let r = h.req(1, describe(4, "Lock1", true, true));
    assert!(describe_result(&r).watch_added);
    assert_eq!(
        h.req(2, release(5, "Lock1")),
        vec![released(2, 5, true), notified(1, 4, true, true)]
    );
    assert!(h.node.semaphore_names().is_empty());
}

#[test]
fn locks_survive_acquire_timeouts_and_go_with_session_expiry() {
    let mut h = Harness::new();
    let s1 = h.open(1, 40_000);
    let s2 = h.open(2, MINUTE);
    assert_eq!(
        h.req(1, acquire_eph(1, "Lock1", u64::MAX, 30_000)),
        vec![acquired(1, 1)]
    );
    assert_eq!(
        h.req(1, acquire_eph(2, "Lock2", 1, 30_000)),
        vec![acquired(1, 2)]
    );
    assert_eq!(
        h.req(2, acquire_eph(3, "Lock2", 1, 30_000)),
        vec![acquired(2, 3)]
    );
    h.detach(1);
    h.detach(2);
    assert_eq!(h.at(30_001), vec![]);
    assert_eq!(h.owners("Lock1"), vec![(s1, u64::MAX)]);
    assert_eq!(h.owners("Lock2"), vec![(s1, 1), (s2, 1)]);
    assert_eq!(h.at(40_001), vec![]);
    assert!(h.node.describe("Lock1").is_none());
    assert_eq!(h.owners("Lock2"), vec![(s2, 1)]);
    assert_eq!(h.node.session_ids(), vec![s2]);
    h.at(60_001);
    assert!(h.node.describe("Lock2").is_none());
    assert!(h.node.session_ids().is_empty());
}

#[test]
fn locks_after_restart_expire_with_the_grace_added() {
    let mut h = Harness::new();
    let s1 = h.open(1, 40_000);
    let s2 = h.open(2, MINUTE);
    h.req(1, acquire_eph(1, "Lock1", u64::MAX, 30_000));
    h.req(1, acquire_eph(2, "Lock2", 1, 30_000));
    h.req(2, acquire_eph(3, "Lock2", 1, 30_000));
    h.node.restart(h.now);
    h.at(49_999);
    assert_eq!(h.owners("Lock1"), vec![(s1, u64::MAX)]);
    h.at(50_001);
    assert!(h.node.describe("Lock1").is_none());
    assert_eq!(h.owners("Lock2"), vec![(s2, 1)]);
    h.at(69_999);
    assert_eq!(h.owners("Lock2"), vec![(s2, 1)]);
    h.at(70_001);
    assert!(h.node.semaphore_names().is_empty());
}

#[test]
fn acquire_data_and_count_show_in_describe() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.create(1, "Sem1", 5);
    assert_eq!(
        h.req(1, acquire_data(1, "Sem1", 3, 0, b"foobar")),
        vec![acquired(1, 1)]
    );
    let r = h.req(1, describe(2, "Sem1", false, false));
    let result = describe_result(&r);
    assert_eq!(
        (result.status, result.issues.len()),
        (StatusCode::Success as i32, 0)
    );
    assert!(!result.watch_added);
    let d = result.semaphore_description.clone().unwrap();
    assert_eq!((d.count, d.limit, d.data.as_slice()), (3, 5, &b""[..]));
    assert_eq!(d.owners.len(), 1);
    let o = &d.owners[0];
    assert_eq!(
        (o.session_id, o.count, o.data.as_slice()),
        (s1, 3, &b"foobar"[..])
    );
    assert_eq!(h.req(1, release(3, "Sem1")), vec![released(1, 3, true)]);
    let d = h.desc("Sem1");
    assert!(d.owners.is_empty());
    assert_eq!(d.count, 0);
}

#[test]
fn describe_without_include_flags_omits_owners_and_waiters() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    h.req(2, acquire(2, "Sem1", 1, MINUTE));
    let r = h.req(
        1,
        Request::DescribeSemaphore(session_request::DescribeSemaphore {
            req_id: 3,
            name: "Sem1".into(),
            ..Default::default()
        }),
    );
    let d = describe_result(&r).semaphore_description.clone().unwrap();
    assert_eq!((d.count, d.owners.len(), d.waiters.len()), (1, 0, 0));
}

#[test]
fn order_ids_are_node_wide_and_consumed_only_by_new_waiter_entries() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "A", 1);
    h.create(1, "B", 1);
    h.req(1, acquire(1, "A", 1, 0)); // order 1
    h.req(2, acquire(2, "A", 1, 0)); // failed try-lock: none consumed
    h.req(2, acquire(3, "B", 1, 0)); // order 2
    h.req(2, acquire(4, "A", 1, MINUTE)); // order 3, waiting
    h.req(2, acquire(5, "A", 1, MINUTE)); // re-acquire while waiting: keeps 3
    h.req(1, acquire(6, "A", 1, 0)); // repeat as owner: keeps 1
    assert_eq!(h.desc("A").owners[0].order_id, 1);
    assert_eq!(h.desc("A").waiters[0].order_id, 3);
    assert_eq!(h.desc("B").owners[0].order_id, 2);
    h.req(1, release(7, "A"));
    assert_eq!(h.desc("A").owners[0].order_id, 3);
    h.req(1, acquire(8, "B", 1, MINUTE)); // order 4
    assert_eq!(h.desc("B").waiters[0].order_id, 4);
}

// ---------------------------------------------------------------------------------------------
// D. Watches
// ---------------------------------------------------------------------------------------------

#[test]
fn data_watch_fires_on_data_change_only() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.create(1, "Sem1", 1);
    let r = h.req(1, describe(1, "Sem1", true, false));
    let result = describe_result(&r);
    assert!(result.watch_added);
    assert_eq!(result.semaphore_description.as_ref().unwrap().count, 0);
    assert_eq!(h.req(1, acquire(2, "Sem1", 1, 0)), vec![acquired(1, 2)]);
    // Identical data is not a change.
    assert_eq!(
        h.req(1, update(3, "Sem1", b"")),
        vec![update_res(1, 3, Outcome::OK)]
    );
    assert_eq!(
        h.req(1, update(4, "Sem1", b"new")),
        vec![update_res(1, 4, Outcome::OK), notified(1, 1, true, false)]
    );
    // One-shot.
    assert_eq!(
        h.req(1, update(5, "Sem1", b"newer")),
        vec![update_res(1, 5, Outcome::OK)]
    );
    let r = h.req(1, describe(6, "Sem1", false, false));
    assert_eq!(
        describe_result(&r)
            .semaphore_description
            .as_ref()
            .unwrap()
            .count,
        1
    );
}

#[test]
fn owners_watch_ignores_data_and_fires_on_acquire() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.create(1, "Sem1", 1);
    assert!(describe_result(&h.req(1, describe(1, "Sem1", false, true))).watch_added);
    assert_eq!(
        h.req(1, update(2, "Sem1", b"x")),
        vec![update_res(1, 2, Outcome::OK)]
    );
    assert_eq!(
        h.req(1, acquire(3, "Sem1", 1, 0)),
        vec![acquired(1, 3), notified(1, 1, false, true)]
    );
}

#[test]
fn two_sessions_watching_different_kinds_hear_only_their_events() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, describe(1, "Sem1", false, true));
    h.req(2, describe(2, "Sem1", true, false));
    assert_eq!(
        h.req(1, update(3, "Sem1", b"x")),
        vec![update_res(1, 3, Outcome::OK), notified(2, 2, true, false)]
    );
    assert_eq!(
        h.req(1, acquire(4, "Sem1", 1, 0)),
        vec![acquired(1, 4), notified(1, 1, false, true)]
    );
}

#[test]
fn owner_death_notifies_owner_watchers_and_promotes() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    let s3 = h.open(3, MINUTE);
    let s4 = h.open(4, MINUTE);
    h.create(1, "Sem1", 2);
    assert_eq!(h.req(1, acquire(1, "Sem1", 1, 0)), vec![acquired(1, 1)]);
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, 0)), vec![acquired(2, 2)]);
    assert_eq!(h.req(3, acquire(3, "Sem1", 1, MINUTE)), vec![pending(3, 3)]);
    assert_eq!(h.req(4, acquire(4, "Sem1", 1, MINUTE)), vec![pending(4, 4)]);
    h.req(2, describe(5, "Sem1", false, true));
    h.req(4, describe(6, "Sem1", false, true));
    assert_eq!(
        h.req(2, stop()),
        vec![
            acquired(3, 3),
            notified(4, 6, false, true),
            stopped(2, s2),
            close(2)
        ]
    );
    assert_eq!(h.owners("Sem1"), vec![(1, 1), (s3, 1)]);
    assert_eq!(
        h.req(1, release(7, "Sem1")),
        vec![released(1, 7, true), acquired(4, 4)]
    );
    assert_eq!(h.owners("Sem1"), vec![(s3, 1), (s4, 1)]);
}

#[test]
fn force_delete_notifies_watchers_with_both_flags() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    h.req(2, describe(2, "Sem1", false, true));
    h.req(1, describe(3, "Sem1", true, false));
    assert_eq!(
        h.req(1, delete(4, "Sem1", true)),
        vec![
            notified(1, 3, true, true),
            notified(2, 2, true, true),
            delete_res(1, 4, Outcome::OK)
        ]
    );
}

#[test]
fn describe_of_a_missing_semaphore_installs_no_watch() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    assert_eq!(
        h.req(1, describe(1, "Sem1", true, true)),
        vec![describe_not_found(1, 1)]
    );
    h.create(1, "Sem1", 1);
    assert_eq!(
        h.req(1, update(2, "Sem1", b"x")),
        vec![update_res(1, 2, Outcome::OK)]
    );
    assert_eq!(h.req(1, acquire(3, "Sem1", 1, 0)), vec![acquired(1, 3)]);
}

#[test]
fn watches_die_with_the_stream() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, describe(1, "Sem1", true, true));
    h.detach(1);
    let (id, _) = h.attach_raw(2, start(s1, MINUTE, 2, b""));
    assert_eq!(id, Some(s1));
    assert_eq!(
        h.req(2, update(2, "Sem1", b"x")),
        vec![update_res(2, 2, Outcome::OK)]
    );
    // Also on a steal without a detach in between.
    h.req(2, describe(3, "Sem1", true, true));
    h.attach_raw(3, start(s1, MINUTE, 3, b""));
    assert_eq!(
        h.req(3, update(4, "Sem1", b"y")),
        vec![update_res(3, 4, Outcome::OK)]
    );
}

#[test]
fn replacing_a_watch_sends_an_empty_notification_first() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, describe(1, "Sem1", true, false));
    // A describe without watch flags leaves the watch alone.
    let r = h.req(1, describe(2, "Sem1", false, false));
    assert!(!describe_result(&r).watch_added);
    let r = h.req(1, describe(3, "Sem1", false, true));
    assert_eq!(r.len(), 2);
    assert_eq!(r[0], notified(1, 1, false, false));
    assert!(describe_result(&r[1..]).watch_added);
    // Now only owners are watched, under req_id 3.
    assert_eq!(
        h.req(1, update(4, "Sem1", b"x")),
        vec![update_res(1, 4, Outcome::OK)]
    );
    assert_eq!(
        h.req(1, acquire(5, "Sem1", 1, 0)),
        vec![acquired(1, 5), notified(1, 3, false, true)]
    );
}

#[test]
fn waiter_only_changes_never_fire_owner_watches() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    h.req(1, describe(2, "Sem1", true, true));
    assert_eq!(h.req(2, acquire(3, "Sem1", 1, MINUTE)), vec![pending(2, 3)]);
    assert_eq!(
        h.req(2, acquire_data(4, "Sem1", 1, MINUTE, b"d")),
        vec![superseded(2, 3), pending(2, 4)]
    );
    assert_eq!(
        h.req(2, release(5, "Sem1")),
        vec![superseded(2, 4), released(2, 5, true)]
    );
    h.req(2, acquire(6, "Sem1", 1, 1_000));
    assert_eq!(h.at(1_000), vec![not_acquired(2, 6)]);
    // Owner repeats with identical data: nothing; with new data: owners event.
    assert_eq!(h.req(1, acquire(7, "Sem1", 1, 0)), vec![acquired(1, 7)]);
    assert_eq!(
        h.req(1, acquire_data(8, "Sem1", 1, 0, b"new")),
        vec![acquired(1, 8), notified(1, 2, false, true)]
    );
}

#[test]
fn destroyed_session_watch_gets_nothing() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(2, acquire(1, "Sem1", 1, 0));
    h.req(2, describe(2, "Sem1", true, true));
    h.req(1, describe(3, "Sem1", false, true));
    assert_eq!(
        h.req(2, stop()),
        vec![notified(1, 3, false, true), stopped(2, s2), close(2)]
    );
}

// ---------------------------------------------------------------------------------------------
// E. Reattach and pending work
// ---------------------------------------------------------------------------------------------

#[test]
fn pending_acquire_is_answered_only_on_the_new_req_id_after_reattach() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    assert_eq!(h.req(2, acquire(2, "Sem1", 1, MINUTE)), vec![pending(2, 2)]);
    h.detach(2);
    let (id, _) = h.attach_raw(3, start(s2, MINUTE, 2, b""));
    assert_eq!(id, Some(s2));
    // No ABORTED for the old req_id: its association died with the stream.
    assert_eq!(h.req(3, acquire(7, "Sem1", 1, MINUTE)), vec![pending(3, 7)]);
    assert_eq!(h.desc("Sem1").waiters[0].order_id, 2);
    assert_eq!(
        h.req(1, release(8, "Sem1")),
        vec![released(1, 8, true), acquired(3, 7)]
    );
}

#[test]
fn detached_waiter_is_promoted_or_times_out_silently() {
    let mut h = Harness::new();
    h.open(1, MINUTE);
    let s2 = h.open(2, 10 * MINUTE);
    let s3 = h.open(3, 10 * MINUTE);
    h.create(1, "Sem1", 1);
    h.req(1, acquire(1, "Sem1", 1, 0));
    h.req(2, acquire(2, "Sem1", 1, MINUTE));
    h.req(3, acquire(3, "Sem1", 1, 30_000));
    h.detach(2);
    h.detach(3);
    assert_eq!(h.req(1, release(4, "Sem1")), vec![released(1, 4, true)]);
    assert_eq!(h.owners("Sem1"), vec![(s2, 1)]);
    assert_eq!(h.at(30_000), vec![]);
    assert!(h.waiters("Sem1").is_empty());
    // Reattached owner re-sends its acquire and gets an immediate answer.
    h.attach_raw(5, start(s2, MINUTE, 2, b""));
    assert_eq!(
        h.req(5, acquire(9, "Sem1", 1, MINUTE)),
        vec![acquired(5, 9)]
    );
    let _ = s3;
}

#[test]
fn waiter_timer_restarts_in_full_after_restart() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    let s2 = h.open(2, MINUTE);
    h.req(1, acquire_eph(1, "Lock1", u64::MAX, 0));
    assert_eq!(
        h.req(2, acquire_eph(2, "Lock1", 1, MINUTE)),
        vec![pending(2, 2)]
    );
    h.at(30_000);
    let effects = h.node.restart(h.now);
    assert_eq!(
        effects,
        vec![
            failure(1, StatusCode::Unavailable, "Link failure"),
            close(1),
            failure(2, StatusCode::Unavailable, "Link failure"),
            close(2)
        ]
    );
    h.attach_raw(3, start(s1, MINUTE, 0, b""));
    h.attach_raw(4, start(s2, MINUTE, 0, b""));
    assert_eq!(h.at(89_999), vec![]);
    assert_eq!(h.waiters("Lock1"), vec![(s2, 1)]);
    // Silent: the association died with the restart.
    assert_eq!(h.at(90_000), vec![]);
    assert!(h.waiters("Lock1").is_empty());
    assert_eq!(h.owners("Lock1"), vec![(s1, u64::MAX)]);
}

// ---------------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------------

#[test]
fn ten_thousand_semaphores_and_waiters_stay_fast() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.open(2, MINUTE);
    let n = 10_000u64;
    for i in 0..n {
        let name = format!("S{i}");
        h.create(1, &name, 1);
        assert_eq!(h.req(1, acquire(i, &name, 1, 0)), vec![acquired(1, i)]);
        assert_eq!(h.req(2, acquire(i, &name, 1, MINUTE)), vec![pending(2, i)]);
    }
    assert_eq!(h.node.semaphore_names().len(), n as usize);
    assert_eq!(h.req(1, stop()).len(), n as usize + 2);
    assert_eq!(h.owners("S0"), vec![(2, 1)]);
    assert_eq!(h.node.session_ids(), vec![2]);
    let _ = s1;

    // One semaphore with 10,000 queued waiters released one at a time.
    let mut h = Harness::new();
    h.open(1, MINUTE);
    h.create(1, "Big", 1);
    h.req(1, acquire(0, "Big", 1, 0));
    for s in 2..(n + 2) {
        h.open(s, MINUTE);
        assert_eq!(h.req(s, acquire(s, "Big", 1, MINUTE)), vec![pending(s, s)]);
    }
    assert_eq!(
        h.req(1, release(1, "Big")),
        vec![released(1, 1, true), acquired(2, 2)]
    );
    for s in 2..(n + 1) {
        assert_eq!(
            h.req(s, release(s, "Big")),
            vec![released(s, s, true), acquired(s + 1, s + 1)]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The journal of changes (`crate::observe`)
// ---------------------------------------------------------------------------------------------

#[test]
fn nothing_is_noted_unless_recording() {
    let mut h = Harness::new();
    let s1 = h.open(1, MINUTE);
    h.create(1, "lock", 1);
    h.req(1, acquire(1, "lock", 1, 0));
    h.req(1, stop());
    assert!(h.node.take_changes().is_empty());
    let _ = s1;
}

#[test]
fn the_journal_tells_every_grant_release_and_end_in_order() {
    use crate::observe::{Change as C, OwnerEnd, SessionEnd};
    let granted = |session: u64, order_id: u64| C::Granted {
        semaphore: "lock".into(),
        session,
        order_id,
        count: 1,
        limit: 1,
    };
    let released = |session: u64, order_id: u64, why| C::Released {
        semaphore: "lock".into(),
        session,
        order_id,
        why,
    };
    let mut h = Harness::new();
    h.node.record_changes();
    let s1 = h.open(1, 1_000);
    let s2 = h.open(2, 1_000);
    h.create(1, "lock", 1);
    h.req(1, acquire(1, "lock", 1, 0));
    h.req(2, acquire(2, "lock", 1, MINUTE));
    assert_eq!(
        h.node.take_changes(),
        vec![
            C::SessionStarted {
                session: s1,
                description: "test".into()
            },
            C::Attached { session: s1 },
            C::SessionStarted {
                session: s2,
                description: "test".into()
            },
            C::Attached { session: s2 },
            granted(s1, 1),
        ]
    );
    // The owner's stream ends; a second later its session expires and the waiter is granted.
    h.detach(1);
    h.at(1_000);
    assert_eq!(
        h.node.take_changes(),
        vec![
            C::Detached { session: s1 },
            C::SessionEnded {
                session: s1,
                why: SessionEnd::Expired
            },
            released(s1, 1, OwnerEnd::SessionEnded),
            granted(s2, 2),
        ]
    );
    // A release, a forced delete under an owner, a forced expiry and a restart.
    h.req(2, release(3, "lock"));
    h.req(2, acquire(4, "lock", 1, 0));
    h.req(2, delete(5, "lock", true));
    let (found, _) = h.node.expire_session(h.now, s2);
    assert!(found);
    h.open(3, 1_000);
    h.node.restart(h.now);
    let changes = h.node.take_changes();
    assert_eq!(
        changes[..6],
        [
            released(s2, 2, OwnerEnd::Released),
            granted(s2, 3),
            released(s2, 3, OwnerEnd::Deleted),
            C::SessionEnded {
                session: s2,
                why: SessionEnd::Forced
            },
            C::SessionStarted {
                session: 3,
                description: "test".into()
            },
            C::Attached { session: 3 },
        ]
    );
    assert_eq!(changes[6..], [C::Restarted, C::Detached { session: 3 }]);
    h.node.restart(h.now);
    assert_eq!(
        h.node.take_changes(),
        vec![C::Restarted],
        "nobody was attached"
    );
}
