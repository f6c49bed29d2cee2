use super::*;
use crate::top::follow::{Announcements, Announcer};
use ydb_coordination::session::{Announced, Announcement};

const NODE: &str = "/local/app";

fn entry(session_id: u64, order_id: u64, count: u64, data: &[u8]) -> SemaphoreSession {
    let mut s = SemaphoreSession::default();
    s.session_id = session_id;
    s.order_id = order_id;
    s.count = count;
    s.data = data.to_vec();
    s
}

fn found(
    name: &str,
    limit: u64,
    owners: Vec<SemaphoreSession>,
    waiters: Vec<SemaphoreSession>,
) -> Described {
    let mut d = SemaphoreDescription::default();
    d.name = name.to_string();
    d.limit = limit;
    d.count = owners.iter().map(|o| o.count).sum();
    d.owners = owners;
    d.waiters = waiters;
    Described::Found(d)
}

/// A session announcing `names` (without saying since when, as version 1 does).
fn announcing(session_id: u64, description: &str, names: &[&str]) -> (u64, Announcer) {
    let mut record = Announcement::new(description);
    record.names = names.iter().map(|n| Announced::listed(*n)).collect();
    let names = record.names_with(&[]).map_err(|g| g.to_string());
    (
        session_id,
        Announcer {
            record,
            names,
            torn: false,
        },
    )
}

/// What a node's announcement semaphore holds: these sessions.
fn ann(sessions: Vec<(u64, Announcer)>) -> Announcements {
    Announcements {
        sessions: sessions.into_iter().collect(),
        intruders: Vec::new(),
    }
}

/// [`Tracker::announced`] of these sessions, without a round trip.
trait Announce {
    fn announce(&mut self, node: &str, read: Result<Vec<(u64, Announcer)>, String>);
}

impl Announce for Tracker {
    fn announce(&mut self, node: &str, read: Result<Vec<(u64, Announcer)>, String>) {
        self.announced(node, read.map(ann), None);
    }
}

/// The wall clock at the tracker's start.
const WALL: u64 = 1_700_000_000_000;

fn tracker(names: &[&str]) -> Tracker {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let clock = Clock {
        instant: Instant::now(),
        wall_ms: WALL,
    };
    Tracker::new(NODE, Selection::new(&names), &[NODE.to_string()], clock)
}

fn sec(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn globs_match_as_a_shell_does() {
    assert!(matches("job-*", "job-7"));
    assert!(matches("job-*", "job-"));
    assert!(!matches("job-*", "jobs"));
    assert!(matches("*-7", "job-7"));
    assert!(matches("j?b*7", "job-17"));
    assert!(matches("*a*b*", "xxaxxbxx"));
    assert!(!matches("*a*b*", "xxbxxaxx"));
    assert!(matches("*", ""));
    assert!(!matches("?", ""));
    assert!(matches("é?", "éà"));
}

#[test]
fn announced_names_are_wanted_and_exact_names_always() {
    let mut t = tracker(&[]);
    assert!(t.wanted(NODE).is_empty());
    t.announce(
        NODE,
        Ok(vec![
            announcing(1, "a", &["job", "pool"]),
            announcing(2, "b", &["pool", "x"]),
        ]),
    );
    let all: Vec<_> = t.wanted(NODE).into_iter().collect();
    assert_eq!(all, ["job", "pool", "x"]);

    let mut t = tracker(&["p*", "cfg"]);
    t.announce(NODE, Ok(vec![announcing(1, "a", &["job", "pool"])]));
    let picked: Vec<_> = t.wanted(NODE).into_iter().collect();
    assert_eq!(picked, ["cfg", "pool"]);
}

#[test]
fn durations_are_exact_only_for_what_was_seen_arriving() {
    let t0 = Instant::now();
    let mut t = tracker(&["job"]);
    t.watched(
        t0,
        NODE,
        "job",
        found("job", 1, vec![entry(1, 10, 1, b"")], vec![]),
    );
    t.polled(t0, NODE, "job", found("job", 1, vec![], vec![]));
    let later = t0 + sec(5);
    t.polled(
        later,
        NODE,
        "job",
        found(
            "job",
            1,
            vec![entry(1, 10, 1, b"")],
            vec![entry(2, 11, 1, b""), entry(3, 12, 1, b"")],
        ),
    );
    let s = t.snapshot(t0 + sec(9));
    let row = &s.semaphores[0];
    assert_eq!(row.owners[0].held_for, sec(9));
    assert!(!row.owners[0].exact, "found holding when the view started");
    let waits: Vec<_> = row
        .waiters
        .iter()
        .map(|w| (w.session_id, w.waiting_for, w.exact))
        .collect();
    assert_eq!(waits, [(2, sec(4), true), (3, sec(4), true)]);
}

#[test]
fn grants_per_minute_count_new_owners_within_the_minute() {
    let t0 = Instant::now();
    let mut t = tracker(&["job"]);
    t.watched(
        t0,
        NODE,
        "job",
        found("job", 1, vec![entry(1, 1, 1, b"")], vec![]),
    );
    // Three hand-overs, one every 20 s: 2 → 3 → 4.
    for (i, order) in [2u64, 3, 4].into_iter().enumerate() {
        let now = t0 + sec(20 * (i as u64 + 1));
        t.watched(
            now,
            NODE,
            "job",
            found("job", 1, vec![entry(order, order, 1, b"")], vec![]),
        );
    }
    assert_eq!(t.snapshot(t0 + sec(60)).semaphores[0].grants_per_minute, 3);
    // 90 s later only the last two are within the minute of the next describe.
    t.watched(
        t0 + sec(90),
        NODE,
        "job",
        found("job", 1, vec![entry(4, 4, 1, b"")], vec![]),
    );
    assert_eq!(t.snapshot(t0 + sec(90)).semaphores[0].grants_per_minute, 2);
}

#[test]
fn sessions_come_from_announcements_and_from_owners_and_waiters() {
    let t0 = Instant::now();
    let mut t = tracker(&[]);
    t.announce(NODE, Ok(vec![announcing(7, "worker 7", &["job"])]));
    t.watched(t0, NODE, "job", held_by("job", 7));
    t.polled(
        t0,
        NODE,
        "job",
        found("job", 1, vec![], vec![entry(9, 2, 1, b"")]),
    );
    let s = t.snapshot(t0);
    let rows: Vec<_> = s
        .sessions
        .iter()
        .map(|r| {
            (
                r.session_id,
                r.description.as_str(),
                r.holds,
                r.waits,
                r.announced,
            )
        })
        .collect();
    assert_eq!(rows, [(7, "worker 7", 1, 0, true), (9, "", 0, 1, false)]);
}

#[test]
fn a_name_no_longer_announced_is_forgotten_and_a_missing_exact_name_is_noted() {
    let t0 = Instant::now();
    let mut t = tracker(&["*", "cfg"]);
    t.announce(NODE, Ok(vec![announcing(1, "", &["job"])]));
    t.watched(
        t0,
        NODE,
        "job",
        found("job", 1, vec![entry(1, 1, 1, b"")], vec![]),
    );
    t.watched(t0, NODE, "cfg", Described::Missing);
    assert_eq!(t.snapshot(t0).semaphores.len(), 1);
    assert_eq!(t.snapshot(t0).notes.len(), 1);
    t.announce(NODE, Ok(vec![announcing(1, "", &[])]));
    t.prune(t0, NODE);
    assert!(t.snapshot(t0).semaphores.is_empty());
    // A late answer for a name no longer wanted is dropped.
    t.polled(t0, NODE, "job", found("job", 1, vec![], vec![]));
    assert!(t.snapshot(t0).semaphores.is_empty());
}

#[test]
fn settled_once_everything_was_read_once() {
    let t0 = Instant::now();
    let mut t = tracker(&["cfg", "j*"]);
    assert!(!t.settled());
    t.announce(NODE, Ok(vec![announcing(1, "", &["job"])]));
    t.resources(NODE, Ok(vec![]));
    assert!(!t.settled());
    t.polled(t0, NODE, "cfg", Described::Missing);
    assert!(!t.settled(), "job was not described yet");
    t.watched(t0, NODE, "job", held_by("job", 1));
    assert!(!t.settled(), "job's queue was not read yet");
    t.polled(t0, NODE, "job", Described::Failed("refused".into()));
    assert!(t.settled(), "a failed read is a gap, reported");
}

#[test]
fn nodes_come_and_go_with_the_layout() {
    let mut t = tracker(&[]);
    let new = t.set_nodes(&[NODE.to_string(), "/local/n2".to_string()]);
    assert_eq!(new, ["/local/n2"]);
    t.announce("/local/n2", Ok(vec![announcing(3, "", &["a"])]));
    t.watched(
        Instant::now(),
        "/local/n2",
        "a",
        found("a", 1, vec![], vec![]),
    );
    assert_eq!(t.snapshot(Instant::now()).semaphores[0].node, "/local/n2");
    assert!(t.set_nodes(&["/local/n2".to_string()]).is_empty());
    t.announce(NODE, Ok(vec![announcing(1, "", &["b"])]));
    assert!(
        t.wanted(NODE).is_empty(),
        "a node no longer watched wants nothing"
    );
}

fn owner_rows(t: &Tracker, now: Instant) -> Vec<(u64, Duration, bool)> {
    t.snapshot(now).semaphores[0]
        .owners
        .iter()
        .map(|o| (o.session_id, o.held_for, o.exact))
        .collect()
}

fn grants(t: &Tracker, now: Instant) -> u64 {
    t.snapshot(now).semaphores[0].grants_per_minute
}

fn held_by(name: &str, session_id: u64) -> Described {
    found(name, 1, vec![entry(session_id, session_id, 1, b"")], vec![])
}

#[test]
fn a_missing_semaphore_is_a_known_empty_one_so_the_next_owner_was_seen_arriving() {
    let t0 = Instant::now();
    let mut t = tracker(&["lock"]);
    t.watched(t0, NODE, "lock", held_by("lock", 1));
    // An ephemeral lock goes with each release.
    t.watched(t0 + sec(1), NODE, "lock", Described::Missing);
    t.watched(t0 + sec(2), NODE, "lock", held_by("lock", 2));
    assert_eq!(owner_rows(&t, t0 + sec(5)), [(2, sec(3), true)]);
    assert_eq!(grants(&t, t0 + sec(5)), 1);
}

#[test]
fn a_failed_read_keeps_what_was_seen_and_makes_the_next_newcomer_a_lower_bound() {
    let t0 = Instant::now();
    let mut t = tracker(&["lock"]);
    t.watched(t0, NODE, "lock", Described::Missing);
    t.watched(t0 + sec(1), NODE, "lock", held_by("lock", 2));
    t.watched(t0 + sec(2), NODE, "lock", Described::Failed("cut".into()));
    t.watched(t0 + sec(3), NODE, "lock", held_by("lock", 2));
    assert_eq!(owner_rows(&t, t0 + sec(4)), [(2, sec(3), true)]);
    t.watched(t0 + sec(5), NODE, "lock", Described::Failed("cut".into()));
    t.watched(t0 + sec(6), NODE, "lock", held_by("lock", 3));
    assert_eq!(owner_rows(&t, t0 + sec(7)), [(3, sec(1), false)]);
    assert_eq!(grants(&t, t0 + sec(7)), 1, "only the grant seen arriving");
}

#[test]
fn grants_per_minute_count_only_the_minute_before_now() {
    let t0 = Instant::now();
    let mut t = tracker(&["job"]);
    t.watched(t0, NODE, "job", Described::Missing);
    for (i, id) in [1u64, 2, 3].into_iter().enumerate() {
        t.watched(t0 + sec(20 * i as u64), NODE, "job", held_by("job", id));
    }
    assert_eq!(grants(&t, t0 + sec(40)), 3);
    // No describe since: the count still moves with now.
    assert_eq!(grants(&t, t0 + sec(90)), 1);
    assert_eq!(grants(&t, t0 + sec(101)), 0);
}

#[test]
fn a_name_let_go_and_announced_again_keeps_its_grants_and_takes_its_owners_as_found() {
    let t0 = Instant::now();
    let mut t = tracker(&[]);
    t.announce(NODE, Ok(vec![announcing(1, "", &["lock"])]));
    t.watched(t0, NODE, "lock", held_by("lock", 1));
    t.watched(t0 + sec(1), NODE, "lock", held_by("lock", 2));
    t.announce(NODE, Ok(vec![]));
    t.prune(t0 + sec(2), NODE);
    assert!(t.snapshot(t0 + sec(2)).semaphores.is_empty());
    t.announce(NODE, Ok(vec![announcing(3, "", &["lock"])]));
    // Session 3 may have held it since before it was announced again.
    t.watched(t0 + sec(3), NODE, "lock", held_by("lock", 3));
    assert_eq!(
        grants(&t, t0 + sec(4)),
        1,
        "the grant of 2, within the minute"
    );
    assert_eq!(owner_rows(&t, t0 + sec(4)), [(3, sec(1), false)]);
}

#[test]
fn the_watch_gives_owners_and_the_poll_the_queue_less_those_granted_since() {
    let t0 = Instant::now();
    let mut t = tracker(&["job"]);
    let waiters = vec![entry(2, 2, 1, b""), entry(3, 3, 1, b"")];
    t.watched(t0, NODE, "job", held_by("job", 1));
    t.resources(NODE, Ok(vec![]));
    t.announce(NODE, Ok(vec![]));
    assert!(!t.settled(), "the queue was not read yet");
    t.polled(
        t0,
        NODE,
        "job",
        found("job", 1, vec![entry(1, 1, 1, b"")], waiters),
    );
    assert!(t.settled());
    t.watched(t0 + sec(1), NODE, "job", held_by("job", 2));
    let queue = |t: &Tracker| -> Vec<u64> {
        t.snapshot(t0 + sec(2)).semaphores[0]
            .waiters
            .iter()
            .map(|w| w.session_id)
            .collect()
    };
    assert_eq!(queue(&t), [3]);
    t.watched(t0 + sec(2), NODE, "job", held_by("job", 2));
    assert_eq!(queue(&t), [3], "kept until the next poll");
    t.polled(t0 + sec(2), NODE, "job", held_by("job", 2));
    assert!(queue(&t).is_empty());
}

#[test]
fn a_poll_older_than_the_watch_neither_moves_the_owners_nor_makes_grants() {
    let t0 = Instant::now();
    let mut t = tracker(&["job"]);
    t.watched(t0, NODE, "job", Described::Missing);
    t.watched(t0 + sec(1), NODE, "job", held_by("job", 2));
    // A poll answered before that watch item still shows 2 waiting and 1 holding.
    let older = found(
        "job",
        1,
        vec![entry(1, 1, 1, b"")],
        vec![entry(2, 2, 1, b"")],
    );
    t.polled(t0 + sec(2), NODE, "job", older);
    assert_eq!(owner_rows(&t, t0 + sec(3)), [(2, sec(2), true)]);
    let s = t.snapshot(t0 + sec(3));
    assert!(s.semaphores[0].waiters.is_empty(), "2 holds it now");
    assert_eq!(grants(&t, t0 + sec(3)), 1);
}

#[test]
fn an_exact_name_is_noted_missing_only_when_no_node_that_answered_has_it() {
    let n2 = "/local/n2";
    let t0 = Instant::now();
    let mut t = tracker(&["cfg"]);
    t.set_nodes(&[NODE.to_string(), n2.to_string()]);
    t.watched(t0, NODE, "cfg", Described::Missing);
    t.watched(t0, n2, "cfg", held_by("cfg", 1));
    assert!(t.snapshot(t0).notes.is_empty());
    t.watched(t0, n2, "cfg", Described::Missing);
    assert_eq!(t.snapshot(t0).notes.len(), 1);
    // A node that could not answer is a gap, noted as such; the other's answer stands.
    t.watched(t0, n2, "cfg", Described::Failed("cut".into()));
    assert_eq!(t.snapshot(t0).notes.len(), 2);
    assert_eq!(t.problems().len(), 1);
}

#[test]
fn an_unreachable_node_shows_no_announced_sessions_and_an_intruder_is_noted() {
    let mut t = tracker(&[]);
    let mut read = ann(vec![announcing(1, "worker", &["job"])]);
    read.intruders
        .push("session 2 holds it with other data".to_string());
    t.announced(NODE, Ok(read), Some(Duration::from_millis(3)));
    let s = t.snapshot(Instant::now());
    assert_eq!(s.sessions.len(), 1);
    assert_eq!(s.notes.len(), 1);
    assert!(!s.complete);
    assert_eq!(t.problems().len(), 1);
    assert_eq!(s.nodes[0].rtt, Some(Duration::from_millis(3)));
    t.announce(NODE, Err("cut".into()));
    let s = t.snapshot(Instant::now());
    assert!(s.sessions.is_empty());
    assert_eq!(t.wanted(NODE).len(), 1, "its names stay followed");
    assert_eq!(t.problems().len(), 1);
    assert_eq!(s.nodes[0].errors, 1);
    assert_eq!(s.nodes[0].last_error.as_deref(), Some("cut"));
}

#[test]
fn a_session_whose_names_cannot_be_told_whole_makes_the_snapshot_partial() {
    let mut t = tracker(&[]);
    let (id, mut a) = announcing(1, "worker", &["job"]);
    a.names = Err("14 names left out of its announcement".to_string());
    t.announce(NODE, Ok(vec![(id, a.clone())]));
    t.resources(NODE, Ok(vec![]));
    t.watched(Instant::now(), NODE, "job", held_by("job", 1));
    t.polled(Instant::now(), NODE, "job", held_by("job", 1));
    // The names it listed are followed all the same.
    assert_eq!(t.wanted(NODE).len(), 1);
    assert!(t.settled());
    assert_eq!(t.problems().len(), 1);
    assert!(!t.snapshot(Instant::now()).complete);
    // Pages read while they changed: not settled, the next read may tell them whole.
    a.torn = true;
    t.announce(NODE, Ok(vec![(id, a)]));
    assert!(!t.settled());
}

#[test]
fn owners_and_waiters_take_their_times_from_their_sessions_announcements() {
    let t0 = Instant::now();
    let clock = Clock {
        instant: t0,
        wall_ms: WALL,
    };
    let mut t = Tracker::new(NODE, Selection::new(&[]), &[NODE.to_string()], clock);
    let (id, mut a) = announcing(1, "", &["job"]);
    a.record.host = "web-3".to_string();
    a.record.pid = Some(4411);
    a.record.started_ms = Some(WALL - 3_600_000);
    a.record.timeout_ms = Some(10_000);
    a.record.contact_ms = Some(WALL - 2_000);
    let names = vec![
        Announced::held("job", WALL - 30_000),
        Announced::waiting("pool", WALL - 5_000),
    ];
    a.names = Ok(names.clone());
    a.record.names = names;
    t.announce(NODE, Ok(vec![(id, a)]));
    t.watched(t0, NODE, "job", held_by("job", 1));
    t.watched(t0, NODE, "pool", held_by("pool", 2));
    t.polled(
        t0,
        NODE,
        "pool",
        found(
            "pool",
            1,
            vec![entry(2, 2, 1, b"")],
            vec![entry(1, 3, 1, b"")],
        ),
    );
    let s = t.snapshot(t0 + sec(10));
    let job = s.semaphores.iter().find(|r| r.name == "job").unwrap();
    assert_eq!(job.owners[0].held_for, sec(40));
    assert!(job.owners[0].exact, "the session says since when");
    assert_eq!(job.owners[0].granted_ms, Some(WALL - 30_000));
    assert_eq!(
        job.grants_per_minute, 1,
        "granted within the minute, says its session"
    );
    let pool = s.semaphores.iter().find(|r| r.name == "pool").unwrap();
    assert_eq!(
        (pool.waiters[0].waiting_for, pool.waiters[0].exact),
        (sec(15), true)
    );
    assert!(!pool.owners[0].exact, "session 2 does not announce");
    let row = s.sessions.iter().find(|r| r.session_id == 1).unwrap();
    assert_eq!((row.host.as_str(), row.pid), ("web-3", Some(4411)));
    assert_eq!(row.age, Some(sec(3610)));
    assert_eq!(row.contact, Some(sec(12)));
    assert_eq!(row.timeout, Some(sec(10)));
    let uses: Vec<_> = row
        .uses
        .iter()
        .map(|u| (u.name.as_str(), u.held, u.position))
        .collect();
    assert_eq!(uses, [("job", true, None), ("pool", false, Some(1))]);
}

#[test]
fn an_owner_waiting_out_a_lock_delay_says_until_when() {
    let t0 = Instant::now();
    let clock = Clock {
        instant: t0,
        wall_ms: WALL,
    };
    let job = ["job".to_string()];
    let mut t = Tracker::new(NODE, Selection::new(&job), &[NODE.to_string()], clock);
    let until = WALL + 20_000;
    let mut d = SemaphoreDescription::default();
    d.name = "job".to_string();
    d.limit = 1;
    d.count = 1;
    d.data = format!("held 5 until {until}").into_bytes();
    d.owners = vec![entry(1, 5, 1, b"")];
    t.watched(t0, NODE, "job", Described::Found(d));
    let owner = |at| t.snapshot(at).semaphores[0].owners[0].delay_until_ms;
    assert_eq!(owner(t0 + sec(5)), Some(until));
    assert_eq!(owner(t0 + sec(21)), None, "the delay has passed");
}

#[test]
fn a_space_without_nodes_is_not_settled_and_gaps_make_the_snapshot_partial() {
    let t0 = Instant::now();
    let empty = Tracker::new("space", Selection::new(&[]), &[], Clock::now());
    assert!(!empty.settled());
    let mut t = tracker(&["cfg", "job", "none-*"]);
    t.announce(NODE, Ok(vec![]));
    t.resources(NODE, Ok(vec![]));
    t.watched(t0, NODE, "cfg", Described::Missing);
    t.watched(t0, NODE, "job", held_by("job", 1));
    t.polled(t0, NODE, "job", held_by("job", 1));
    assert!(t.settled());
    assert!(t.problems().is_empty(), "a missing name is not a gap");
    t.polled(t0, NODE, "job", Described::Failed("refused".into()));
    t.resources(NODE, Err("refused".into()));
    assert_eq!(t.problems().len(), 2);
}
