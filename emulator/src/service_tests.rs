//! The shell's locks: each coordination node is served under a lock of its own, as YDB serves
//! each from a tablet of its own.

use std::sync::mpsc as std_mpsc;
use std::thread;
use std::time::Duration;

use super::*;
use crate::proto::session_request::{CreateSemaphore, SessionStart};
use crate::proto::session_response::Response as Answer;
use crate::proto::{NodeConfigProto, SessionResponse};

/// How long a request that must complete may take: a bound, never waited out when it does.
const BOUND: Duration = Duration::from_secs(30);

fn shared(nodes: &[&str]) -> Shared {
    let world = World::default();
    for node in nodes {
        world
            .create_node((*node).to_string(), NodeConfigProto::default())
            .unwrap();
    }
    Shared {
        database: "/local".to_string(),
        advertised: std::sync::Mutex::new(Vec::new()),
        tls: false,
        world,
        changed: Notify::new(),
        shutdown: CancellationToken::new(),
        auth: None,
        max_message: crate::DEFAULT_MAX_MESSAGE_SIZE,
    }
}

/// A stream with a session attached through the shell's `start`.
struct Stream {
    node: Arc<Node>,
    id: StreamId,
    rx: mpsc::UnboundedReceiver<Outbound>,
    closed: CancellationToken,
}

impl Stream {
    fn attach(shared: &Shared, path: &str) -> Self {
        let id = shared.world.open_stream();
        let (tx, rx) = mpsc::unbounded_channel();
        let closed = CancellationToken::new();
        let first = SessionRequest {
            request: Some(session_request::Request::SessionStart(SessionStart {
                path: path.to_string(),
                timeout_millis: 10_000,
                ..SessionStart::default()
            })),
        };
        let (node, _) = start(shared, None, true, id, Some(Ok(first)), &tx, &closed).unwrap();
        let mut stream = Self {
            node,
            id,
            rx,
            closed,
        };
        assert!(matches!(stream.next(), Answer::SessionStarted(_)));
        stream
    }

    /// The next message queued for the client.
    fn next(&mut self) -> Answer {
        match self.rx.try_recv() {
            Ok(Outbound::Message(SessionResponse {
                response: Some(answer),
            })) => answer,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// The status of the next message, a `create_semaphore` answer.
    fn created(&mut self) -> StatusCode {
        match self.next() {
            Answer::CreateSemaphoreResult(r) => StatusCode::try_from(r.status).unwrap(),
            other => panic!("expected a create_semaphore answer, got {other:?}"),
        }
    }
}

fn create(name: &str) -> session_request::Request {
    session_request::Request::CreateSemaphore(CreateSemaphore {
        req_id: 1,
        name: name.to_string(),
        limit: 1,
        data: Vec::new(),
    })
}

/// While node A's lock is held, a request on node B completes, and one on node A waits: it
/// runs only once the lock is let go, after what was done under it.
#[test]
fn each_node_has_its_own_lock() {
    let shared = shared(&["/local/a", "/local/b"]);
    let mut a = Stream::attach(&shared, "/local/a");
    let mut b = Stream::attach(&shared, "/local/b");
    let (node_a, node_b) = (a.node.clone(), b.node.clone());
    let (id_a, id_b) = (a.id, b.id);
    let shared = &shared;
    thread::scope(|scope| {
        let (node_a, node_b) = (&node_a, &node_b);
        let mut held = node_a.lock();
        let (a_done, a_finished) = std_mpsc::channel();
        let (b_done, b_finished) = std_mpsc::channel();
        scope.spawn(move || a_done.send(request(shared, node_a, id_a, create("s"))));
        scope.spawn(move || b_done.send(request(shared, node_b, id_b, create("s"))));

        let served = b_finished.recv_timeout(BOUND);
        assert!(
            matches!(served, Ok(Some(_))),
            "node B waited for node A's lock"
        );
        assert_eq!(b.created(), StatusCode::Success);

        // Node A's request cannot have run: its lock is held here. Create the semaphore under
        // it; the request, run after, finds the semaphore there.
        assert!(a_finished.try_recv().is_err());
        assert!(a.rx.try_recv().is_err());
        let effects = held.serve(Instant::now(), id_a, create("s"));
        held.apply(effects);
        assert_eq!(a.created(), StatusCode::Success);
        drop(held);
        assert!(matches!(a_finished.recv_timeout(BOUND), Ok(Some(_))));
        assert_eq!(a.created(), StatusCode::AlreadyExists);
    });
    assert_eq!(shared.world.traffic().requests, 3);
}

/// A stream whose node was dropped gets UNAVAILABLE and is closed; its requests reach no
/// node, not even one created again at the same path, which serves sessions of its own.
#[test]
fn a_dropped_node_serves_no_stream() {
    let shared = shared(&["/local/a"]);
    let mut old = Stream::attach(&shared, "/local/a");
    shared.world.drop_node("/local/a").unwrap();
    assert!(matches!(old.next(), Answer::Failure(f) if f.status == StatusCode::Unavailable as i32));
    assert!(old.closed.is_cancelled());
    assert!(request(&shared, &old.node, old.id, create("s")).is_none());

    shared
        .world
        .create_node("/local/a".to_string(), NodeConfigProto::default())
        .unwrap();
    let mut new = Stream::attach(&shared, "/local/a");
    assert!(!Arc::ptr_eq(&old.node, &new.node));
    shared.with_node(&old.node, |n| n.close_stream(Instant::now(), old.id));
    assert!(request(&shared, &new.node, new.id, create("s")).is_some());
    assert_eq!(new.created(), StatusCode::Success);
    assert!(old.rx.try_recv().is_err());
    assert_eq!(shared.world.traffic().requests, 1);
}
