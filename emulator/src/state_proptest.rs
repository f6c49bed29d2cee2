//! Property tests: random operation sequences against [`NodeState`], checking the queue and
//! bookkeeping invariants after every step. A `§` here is a section of `emulator/SPEC.md`.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::proto::session_request::Request;
use crate::proto::session_response::Response;

const CLIENTS: usize = 4;
const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Attach {
        client: usize,
        timeout: u64,
        key_ok: bool,
    },
    Detach {
        client: usize,
    },
    Acquire {
        client: usize,
        sem: usize,
        count: u64,
        timeout: u64,
        ephemeral: bool,
        data: u8,
    },
    Release {
        client: usize,
        sem: usize,
    },
    Create {
        client: usize,
        sem: usize,
        limit: u64,
    },
    Delete {
        client: usize,
        sem: usize,
        force: bool,
    },
    Describe {
        client: usize,
        sem: usize,
        watch_data: bool,
        watch_owners: bool,
    },
    Update {
        client: usize,
        sem: usize,
        data: u8,
    },
    Stop {
        client: usize,
    },
    Advance {
        ms: u64,
    },
    Restart,
    Expire {
        client: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let client = 0..CLIENTS;
    let sem = 0..NAMES.len();
    let count = prop_oneof![6 => Just(1u64), 2 => Just(2), 1 => Just(3), 1 => Just(u64::MAX)];
    let timeout = prop_oneof![
        1 => Just(0u64),
        1 => Just(1_000),
        2 => Just(5_000),
        2 => Just(u64::MAX),
    ];
    let session_timeout = prop_oneof![1 => Just(0u64), 2 => Just(2_000), 4 => Just(20_000)];
    let advance = prop_oneof![3 => 0..1_500u64, 1 => 2_000..12_000u64];
    prop_oneof![
        8 => (client.clone(), session_timeout, prop::bool::weighted(0.9))
            .prop_map(|(client, timeout, key_ok)| Op::Attach { client, timeout, key_ok }),
        1 => client.clone().prop_map(|client| Op::Detach { client }),
        // "c" is meant to be ephemeral, "a" and "b" persistent; sometimes the flag mismatches.
        20 => (client.clone(), sem.clone(), count, timeout, prop::bool::weighted(0.1), 0..2u8)
            .prop_map(|(client, sem, count, timeout, mismatch, data)| Op::Acquire {
                client, sem, count, timeout, ephemeral: (sem == 2) != mismatch, data,
            }),
        6 => (client.clone(), sem.clone()).prop_map(|(client, sem)| Op::Release { client, sem }),
        2 => (client.clone(), sem.clone(), 1..=3u64)
            .prop_map(|(client, sem, limit)| Op::Create { client, sem, limit }),
        1 => (client.clone(), sem.clone(), any::<bool>())
            .prop_map(|(client, sem, force)| Op::Delete { client, sem, force }),
        4 => (client.clone(), sem.clone(), any::<bool>(), any::<bool>()).prop_map(
            |(client, sem, watch_data, watch_owners)| Op::Describe {
                client, sem, watch_data, watch_owners,
            }
        ),
        1 => (client.clone(), sem.clone(), 0..3u8)
            .prop_map(|(client, sem, data)| Op::Update { client, sem, data }),
        1 => client.clone().prop_map(|client| Op::Stop { client }),
        8 => advance.prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
        1 => client.prop_map(|client| Op::Expire { client }),
    ]
}

#[derive(Debug, Default, Clone)]
struct Client {
    session: Option<u64>,
    stream: Option<StreamId>,
    seq_no: u64,
}

/// The node plus what a shell would track: which client drives which stream.
struct World {
    node: NodeState,
    now: Instant,
    clients: Vec<Client>,
    next_stream: StreamId,
    /// Highest order_id ever granted ownership, per semaphore name.
    max_grant: HashMap<String, u64>,
    /// Owners (order_id -> session) at the previous step, per semaphore name.
    prev_owners: HashMap<String, HashMap<u64, u64>>,
}

impl World {
    /// A node with every client attached and two persistent semaphores ("a" limit 3, "b"
    /// limit 1), so that random sequences reach contended states quickly.
    fn new() -> Self {
        let mut world = World {
            node: NodeState::new(NodeConfigProto::default()),
            now: Instant::from_std(std::time::Instant::now()),
            clients: vec![Client::default(); CLIENTS],
            next_stream: 1,
            max_grant: HashMap::new(),
            prev_owners: HashMap::new(),
        };
        for client in 0..CLIENTS {
            world.step(&Op::Attach {
                client,
                timeout: 20_000,
                key_ok: true,
            });
        }
        for (sem, limit) in [(0, 3), (1, 1)] {
            world.step(&Op::Create {
                client: 0,
                sem,
                limit,
            });
        }
        world
    }

    /// The client's stream, or a stream that was never bound (to exercise "not attached").
    fn stream_of(&self, client: usize) -> StreamId {
        self.clients
            .get(client)
            .and_then(|c| c.stream)
            .unwrap_or(1_000_000 + client as u64)
    }

    fn step(&mut self, op: &Op) {
        let bound_before: HashSet<StreamId> = self.node.streams.keys().copied().collect();
        let mut own_stream = None;
        let mut acquire_req: Option<(StreamId, u64, usize)> = None;
        let effects = match op.clone() {
            Op::Attach {
                client,
                timeout,
                key_ok,
            } => {
                let stream = self.next_stream;
                self.next_stream += 1;
                own_stream = Some(stream);
                let c = &mut self.clients[client];
                c.seq_no += 1;
                let key = if key_ok {
                    vec![client as u8; 8]
                } else {
                    b"wrong".to_vec()
                };
                let start = session_request::SessionStart {
                    path: "/local/node".into(),
                    session_id: c.session.unwrap_or(0),
                    timeout_millis: timeout,
                    description: String::new(),
                    seq_no: c.seq_no,
                    protection_key: key,
                };
                let (id, effects) = self.node.attach(self.now, stream, &start);
                if let Some(id) = id {
                    assert!(start.session_id == 0 || start.session_id == id);
                    let c = &mut self.clients[client];
                    c.session = Some(id);
                    c.stream = Some(stream);
                    assert_eq!(self.node.stream_session(stream), Some(id));
                }
                effects
            }
            Op::Detach { client } => {
                let stream = self.clients[client].stream.take();
                match stream {
                    Some(stream) => self.node.detach(self.now, stream),
                    None => Vec::new(),
                }
            }
            Op::Advance { ms } => {
                self.now += Duration::from_millis(ms);
                let effects = self.node.advance(self.now);
                if let Some(next) = self.node.next_deadline() {
                    assert!(next > self.now, "advance left an overdue timer");
                }
                effects
            }
            Op::Restart => self.node.restart(self.now),
            Op::Expire { client } => {
                let id = self.clients[client].session.unwrap_or(u64::MAX);
                let existed = self.node.sessions.contains_key(&id);
                let (found, effects) = self.node.expire_session(self.now, id);
                assert_eq!(found, existed);
                effects
            }
            other => {
                let (client, req) = match other {
                    Op::Acquire {
                        client,
                        sem,
                        count,
                        timeout,
                        ephemeral,
                        data,
                    } => {
                        let req_id = self.next_stream * 100;
                        acquire_req = Some((self.stream_of(client), req_id, sem));
                        let req = Request::AcquireSemaphore(session_request::AcquireSemaphore {
                            req_id,
                            name: NAMES[sem].into(),
                            timeout_millis: timeout,
                            count,
                            data: vec![data],
                            ephemeral,
                        });
                        (client, req)
                    }
                    Op::Release { client, sem } => (
                        client,
                        Request::ReleaseSemaphore(session_request::ReleaseSemaphore {
                            req_id: 1,
                            name: NAMES[sem].into(),
                        }),
                    ),
                    Op::Create { client, sem, limit } => (
                        client,
                        Request::CreateSemaphore(session_request::CreateSemaphore {
                            req_id: 2,
                            name: NAMES[sem].into(),
                            limit,
                            data: Vec::new(),
                        }),
                    ),
                    Op::Delete { client, sem, force } => (
                        client,
                        Request::DeleteSemaphore(session_request::DeleteSemaphore {
                            req_id: 3,
                            name: NAMES[sem].into(),
                            force,
                        }),
                    ),
                    Op::Describe {
                        client,
                        sem,
                        watch_data,
                        watch_owners,
                    } => (
                        client,
                        Request::DescribeSemaphore(session_request::DescribeSemaphore {
                            req_id: 4,
                            name: NAMES[sem].into(),
                            include_owners: true,
                            include_waiters: true,
                            watch_data,
                            watch_owners,
                        }),
                    ),
                    Op::Update { client, sem, data } => (
                        client,
                        Request::UpdateSemaphore(session_request::UpdateSemaphore {
                            req_id: 5,
                            name: NAMES[sem].into(),
                            data: vec![data],
                        }),
                    ),
                    Op::Stop { client } => (
                        client,
                        Request::SessionStop(session_request::SessionStop {}),
                    ),
                    _ => unreachable!("handled above"),
                };
                self.next_stream += 1;
                let stream = self.stream_of(client);
                own_stream = Some(stream);
                self.node.request(self.now, stream, req)
            }
        };

        check_effects(&effects, &bound_before, own_stream);

        // Pending only when really waiting; acquired=true only when really owning.
        if let Some((stream, req_id, sem)) = acquire_req
            && let Some(sid) = self.node.stream_session(stream)
        {
            let last = effects.iter().rev().find_map(|e| match e {
                Effect::Send(s, r) if *s == stream => match &r.response {
                    Some(Response::AcquireSemaphorePending(p)) if p.req_id == req_id => Some(false),
                    Some(Response::AcquireSemaphoreResult(a))
                        if a.req_id == req_id && a.acquired =>
                    {
                        Some(true)
                    }
                    _ => None,
                },
                _ => None,
            });
            if let Some(owner) = last {
                let desc = self.node.describe(NAMES[sem]);
                let desc = desc.as_ref();
                let in_owners = desc.is_some_and(|d| d.owners.iter().any(|o| o.session_id == sid));
                let in_waiters =
                    desc.is_some_and(|d| d.waiters.iter().any(|w| w.session_id == sid));
                assert_eq!((in_owners, in_waiters), (owner, !owner));
            }
        }

        // Act as the shell: every closed stream is reported back as ended.
        for effect in &effects {
            if let Effect::Close(stream) = effect {
                assert_eq!(self.node.detach(self.now, *stream), vec![]);
                for c in &mut self.clients {
                    if c.stream == Some(*stream) {
                        c.stream = None;
                    }
                }
            }
        }
        for c in &mut self.clients {
            if let Some(id) = c.session
                && !self.node.sessions.contains_key(&id)
            {
                *c = Client {
                    seq_no: c.seq_no,
                    ..Client::default()
                };
            }
            if let Some(stream) = c.stream {
                assert_eq!(self.node.stream_session(stream), c.session);
            }
        }

        check_state(&self.node);
        self.check_grants();
    }

    /// Ownership grants on a semaphore carry strictly increasing order_ids, and an owner's
    /// order_id is stable for its whole tenure (§5).
    fn check_grants(&mut self) {
        let mut now_owners: HashMap<String, HashMap<u64, u64>> = HashMap::new();
        for name in self.node.semaphore_names() {
            let desc = self.node.describe(&name).unwrap();
            let owners: HashMap<u64, u64> = desc
                .owners
                .iter()
                .map(|o| (o.order_id, o.session_id))
                .collect();
            let prev = self.prev_owners.get(&name);
            let max = self.max_grant.get(&name).copied().unwrap_or(0);
            let mut new_max = max;
            for (&order_id, &session) in &owners {
                if prev.is_some_and(|p| p.get(&order_id) == Some(&session)) {
                    continue;
                }
                assert!(
                    order_id > max,
                    "grant of {order_id} on {name} after a grant of {max}"
                );
                new_max = new_max.max(order_id);
            }
            if let Some(prev) = prev {
                for (order_id, session) in prev {
                    // The same session cannot hold the semaphore under another order_id.
                    if owners.values().any(|s| s == session) {
                        assert_eq!(owners.get(order_id), Some(session));
                    }
                }
            }
            self.max_grant.insert(name.clone(), new_max);
            now_owners.insert(name, owners);
        }
        self.prev_owners = now_owners;
    }
}

/// Message-level checks on one batch of effects.
fn check_effects(effects: &[Effect], bound_before: &HashSet<StreamId>, own: Option<StreamId>) {
    let mut closed = HashSet::new();
    for effect in effects {
        match effect {
            Effect::Send(stream, msg) => {
                assert!(!closed.contains(stream), "message after close: {effects:?}");
                assert!(
                    bound_before.contains(stream) || own == Some(*stream),
                    "message to a stream nobody holds: {effects:?}"
                );
                check_status(msg);
            }
            Effect::Close(stream) => {
                assert!(closed.insert(*stream), "closed twice: {effects:?}");
            }
        }
    }
}

/// Success carries no issue; every error carries exactly one.
fn check_status(msg: &SessionResponse) {
    let (status, issues) = match &msg.response {
        Some(Response::Failure(f)) => {
            assert_eq!(f.issues.len(), 1);
            return;
        }
        Some(Response::AcquireSemaphoreResult(r)) => {
            if r.acquired {
                assert_eq!(r.status, StatusCode::Success as i32);
            }
            (r.status, r.issues.len())
        }
        Some(Response::ReleaseSemaphoreResult(r)) => (r.status, r.issues.len()),
        Some(Response::DescribeSemaphoreResult(r)) => {
            assert_eq!(
                r.semaphore_description.is_some(),
                r.status == StatusCode::Success as i32
            );
            (r.status, r.issues.len())
        }
        Some(Response::CreateSemaphoreResult(r)) => (r.status, r.issues.len()),
        Some(Response::UpdateSemaphoreResult(r)) => (r.status, r.issues.len()),
        Some(Response::DeleteSemaphoreResult(r)) => (r.status, r.issues.len()),
        Some(_) => return,
        None => panic!("empty response"),
    };
    let expected = usize::from(status != StatusCode::Success as i32);
    assert_eq!(issues, expected, "{msg:?}");
}

/// Internal consistency of the node after every step.
fn check_state(node: &NodeState) {
    let mut entries_per_session: HashMap<SessionId, usize> = HashMap::new();
    for (&sem_id, sem) in &node.semaphores {
        assert_eq!(node.by_name.get(&sem.name), Some(&sem_id));
        // Owners' counts add up to `count`, which never exceeds the limit.
        let sum: u128 = sem.owners.values().map(|o| u128::from(o.count)).sum();
        assert_eq!(sum, u128::from(sem.count), "{sem:?}");
        assert!(sem.count <= sem.limit);
        // No waiter is ever bypassed: after processing, the head does not fit.
        if let Some(head) = sem.waiters.values().next() {
            assert!(!sem.can_acquire(head.count), "head waiter fits: {sem:?}");
        }
        // Grants follow the queue: every owner came before every waiter.
        if let (Some(last_owner), Some(first_waiter)) =
            (sem.owners.keys().next_back(), sem.waiters.keys().next())
        {
            assert!(last_owner < first_waiter, "waiter bypassed: {sem:?}");
        }
        // Ephemeral semaphores exist exactly while they have an owner or a waiter.
        if sem.ephemeral {
            assert!(!sem.is_empty(), "empty ephemeral semaphore: {sem:?}");
            assert_eq!(sem.limit, u64::MAX);
        }
        // At most one entry per session per semaphore, matching the session's link.
        let mut seen = HashSet::new();
        for (order_id, session) in sem
            .owners
            .iter()
            .map(|(k, o)| (k, o.session))
            .chain(sem.waiters.iter().map(|(k, w)| (k, w.session)))
        {
            assert!(seen.insert(session), "two entries of {session} on {sem:?}");
            let s = node.sessions.get(&session).unwrap();
            assert_eq!(s.links.get(&sem_id), Some(order_id));
            *entries_per_session.entry(session).or_default() += 1;
        }
        for (&order_id, w) in &sem.waiters {
            assert!(w.count >= 1);
            match w.deadline {
                Some(d) => assert!(node.timers.contains(&(
                    d,
                    TimerKey::WaiterTimeout {
                        sem: sem_id,
                        order_id
                    }
                ))),
                None => assert_eq!(w.timeout_millis, u64::MAX),
            }
        }
        for sid in sem.data_watchers.iter().chain(&sem.owner_watchers) {
            let s = node.sessions.get(sid).unwrap();
            assert!(s.watches.contains_key(&sem_id));
        }
    }
    for (&sid, s) in &node.sessions {
        assert_eq!(
            s.links.len(),
            entries_per_session.get(&sid).copied().unwrap_or(0)
        );
        match s.stream {
            Some(stream) => {
                assert_eq!(node.streams.get(&stream), Some(&sid));
                assert_eq!(s.expiry, None);
            }
            None => {
                assert!(s.wait_cookies.is_empty() && s.watches.is_empty());
                let d = s.expiry.unwrap();
                assert!(node.timers.contains(&(d, TimerKey::SessionExpiry(sid))));
            }
        }
        for sem_id in s.wait_cookies.keys() {
            let sem = node.semaphores.get(sem_id).unwrap();
            let order_id = s.links.get(sem_id).unwrap();
            assert!(sem.waiters.contains_key(order_id), "cookie without waiter");
        }
        for sem_id in s.watches.keys() {
            let sem = node.semaphores.get(sem_id).unwrap();
            assert!(sem.data_watchers.contains(&sid) || sem.owner_watchers.contains(&sid));
        }
    }
    for (stream, sid) in &node.streams {
        assert_eq!(node.sessions.get(sid).unwrap().stream, Some(*stream));
    }
    for &(deadline, key) in &node.timers {
        match key {
            TimerKey::SessionExpiry(sid) => {
                assert_eq!(node.sessions.get(&sid).unwrap().expiry, Some(deadline));
            }
            TimerKey::WaiterTimeout { sem, order_id } => {
                let w = &node.semaphores.get(&sem).unwrap().waiters[&order_id];
                assert_eq!(w.deadline, Some(deadline));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operation_sequences_keep_the_invariants(ops in prop::collection::vec(op(), 1..60)) {
        let mut world = World::new();
        for op in &ops {
            world.step(op);
        }
        // Draining all time ends in a quiet node: every detached session expires.
        world.step(&Op::Advance { ms: 3_600_000 });
        for c in 0..CLIENTS {
            world.step(&Op::Detach { client: c });
        }
        world.step(&Op::Advance { ms: 3_600_000 });
        prop_assert!(world.node.session_ids().is_empty());
        let ephemeral_left = world
            .node
            .semaphore_names()
            .iter()
            .any(|n| world.node.describe(n).unwrap().ephemeral);
        prop_assert!(!ephemeral_left);
        prop_assert_eq!(world.node.next_deadline(), None);
    }
}
