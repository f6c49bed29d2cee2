//! One rule for every call with a bound: it ends by its bound plus one measured round trip
//! and 200 ms, whatever the node does, and at the bound it is "not acquired" (`None`) only
//! when the server said so, else `Unavailable`; never `SessionExpired` for a session that
//! is still alive.
//!
//! Every public bounded form on one node (in a session and on a session manager) and in a
//! lock space (fixed, and following a directory in the middle of a reshard), crossed with
//! what the node does: the lock is busy; the node stalls with its streams up; the streams
//! are cut (and come back); every connection is refused; the directory alone stalls; the
//! session is replaced while the call waits. The faults hit one client only: its traffic
//! goes through fault proxies (one for the lock nodes, one for the directory), while the
//! holder that keeps the lock busy talks to the emulator directly.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::within;
use futures::future::BoxFuture;
use std::any::Any;
use tokio::time::Instant;
use ydb_coordination::emulator::{Emulator, FaultProxy};
use ydb_coordination::space::{Layout, LockSpace, SpaceDirectory};
use ydb_coordination::{
    AcquireOptions, Acquiring, Client, Error, ErrorKind, Session, SessionManager, SessionOptions,
};

const NODE: &str = "/local/app";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const DIR: &str = "/local/dir";
const SPACE: &str = "billing";
/// The bound of every `_timeout` form here.
const BOUND: Duration = Duration::from_millis(500);
/// The rule's slack past the bound: 200 ms and a round trip (well under 100 ms here).
const SLACK: Duration = Duration::from_millis(300);
/// A lock delay shorter than the bound: a name new to its node waits it out, then goes on.
const DELAY: Duration = Duration::from_millis(200);

fn node_path(node: &str) -> String {
    format!("/local/{node}")
}

/// What the node does while the call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Someone else holds the lock.
    Busy,
    /// The faulted client's traffic stops, its connections stay open (the lock is busy).
    Stalled,
    /// The faulted client's connections break once and come back (the lock is busy).
    Cut,
    /// The faulted client's connections break and every new one is refused.
    Refusing,
    /// The directory alone stalls (a space in a reshard; the lock is free).
    DirectoryStalled,
    /// The faulted session is expired by the server while the call waits (the lock is
    /// busy): a manager replaces it.
    Replaced,
}

impl Fault {
    /// What the call ends with: `Some(true)` a guard, `Some(false)` not acquired (`None`),
    /// `None` an error of kind `Unavailable`.
    fn expected(self) -> Option<bool> {
        match self {
            Fault::Busy | Fault::Cut | Fault::Replaced => Some(false),
            Fault::Stalled | Fault::Refusing | Fault::DirectoryStalled => None,
        }
    }
}

/// Where the faulted caller locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Session,
    Manager,
    /// A lock space with a fixed layout over three nodes.
    Space,
    /// A lock space following its directory, in the transition `A+B`.
    Reshard,
}

/// A bounded form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    SessionTry,
    SessionTimeout,
    TryLock,
    LockTimeout,
    DelayLockTimeout,
    SemaphoreTry,
    SemaphoreTimeout,
    TryWrite,
    ReadTimeout,
    TryCampaign,
    CampaignTimeout,
    MultiTry,
    MultiTimeout,
}

impl Form {
    const ALL: [Form; 13] = [
        Form::SessionTry,
        Form::SessionTimeout,
        Form::TryLock,
        Form::LockTimeout,
        Form::DelayLockTimeout,
        Form::SemaphoreTry,
        Form::SemaphoreTimeout,
        Form::TryWrite,
        Form::ReadTimeout,
        Form::TryCampaign,
        Form::CampaignTimeout,
        Form::MultiTry,
        Form::MultiTimeout,
    ];

    fn bound(self) -> Duration {
        match self {
            Form::SessionTry
            | Form::TryLock
            | Form::SemaphoreTry
            | Form::TryWrite
            | Form::TryCampaign
            | Form::MultiTry => Duration::ZERO,
            _ => BOUND,
        }
    }

    /// Whether the form exists where the caller locks.
    fn exists(self, at: Where) -> bool {
        match self {
            Form::SessionTry | Form::SessionTimeout => at == Where::Session,
            _ => true,
        }
    }
}

/// The lock names: one that moves in the reshard (two places in `A+B`), one more for the
/// multi-locks.
struct Names {
    main: String,
    other: String,
}

fn names(transition: &Layout) -> Names {
    let mut moving = (0..)
        .map(|i| format!("job-{i}"))
        .filter(|n| transition.parts(n).len() == 2);
    Names {
        main: moving.next().unwrap(),
        other: moving.next().unwrap(),
    }
}

fn reshard() -> (Layout, Layout) {
    let a = Layout::new(1, ["n1", "n2"]).unwrap();
    let t = a.add_node("n3").unwrap();
    (a, t)
}

/// The world of one case.
struct World {
    emulator: Emulator,
    direct: Client,
    proxy: FaultProxy,
    dir_proxy: FaultProxy,
    names: Names,
    /// The holder that keeps the lock busy, whatever it holds (dropped at the end).
    _held: Vec<Box<dyn std::any::Any + Send>>,
}

impl World {
    async fn start(transition: &Layout) -> Self {
        let builder = NODES
            .iter()
            .fold(Emulator::builder().node(NODE).node(DIR), |b, n| {
                b.node(node_path(n))
            });
        let emulator = within(builder.start()).await.unwrap();
        let direct = within(Client::connect(&emulator.connection_string()))
            .await
            .unwrap();
        let proxy = within(FaultProxy::start(emulator.local_addr()))
            .await
            .unwrap();
        let dir_proxy = within(FaultProxy::start(emulator.local_addr()))
            .await
            .unwrap();
        Self {
            names: names(transition),
            emulator,
            direct,
            proxy,
            dir_proxy,
            _held: Vec::new(),
        }
    }

    async fn client_through(&self, proxy: &FaultProxy) -> Client {
        within(
            Client::builder(proxy.connection_string(self.emulator.database()))
                .discovery(false)
                .build(),
        )
        .await
        .unwrap()
    }

    async fn space(&self, client: &Client, layout: &Layout) -> LockSpace {
        let builder = NODES.iter().fold(LockSpace::builder(), |b, n| {
            b.node(n, client, &node_path(n))
        });
        within(builder.layout(layout.clone()).open()).await.unwrap()
    }

    async fn following(&self, client: &Client, dir_client: &Client) -> LockSpace {
        let builder = NODES.iter().fold(LockSpace::builder(), |b, n| {
            b.node(n, client, &node_path(n))
        });
        within(builder.directory(dir_client, DIR, SPACE).open())
            .await
            .unwrap()
    }
}

/// The faulted caller.
enum Caller {
    Session(Session),
    Manager(SessionManager),
    Space(LockSpace),
}

/// Makes the lock of `form` busy: the same recipe, on the same names, held by a caller
/// of its own that talks to the emulator directly.
async fn hold(world: &mut World, form: Form, at: Where, layout: &Layout) {
    let (main, other) = (world.names.main.clone(), world.names.other.clone());
    if matches!(at, Where::Space | Where::Reshard) {
        let space = world.space(&world.direct, layout).await;
        fn boxed<G: Send + 'static>(g: ydb_coordination::Result<G>) -> Box<dyn Any + Send> {
            Box::new(g.unwrap())
        }
        let guard = match form {
            Form::DelayLockTimeout => {
                boxed(within(space.mutex(&main).lock_delay(DELAY).lock()).await)
            }
            Form::SemaphoreTry | Form::SemaphoreTimeout => {
                boxed(within(space.semaphore(&main, 2).acquire(2)).await)
            }
            Form::TryCampaign | Form::CampaignTimeout => {
                boxed(within(space.election(&main).campaign(b"other")).await)
            }
            Form::MultiTry | Form::MultiTimeout => boxed(within(space.mutex(&other).lock()).await),
            Form::TryWrite | Form::ReadTimeout => boxed(within(space.rwlock(&main).write()).await),
            _ => boxed(within(space.mutex(&main).lock()).await),
        };
        world._held.push(Box::new((space, guard)));
        return;
    }
    let session = within(world.direct.session(NODE, SessionOptions::new()))
        .await
        .unwrap();
    let held: Box<dyn std::any::Any + Send> = match form {
        Form::DelayLockTimeout => Box::new(
            within(session.mutex(&main).lock_delay(DELAY).lock())
                .await
                .unwrap(),
        ),
        Form::SemaphoreTry | Form::SemaphoreTimeout => Box::new(
            within(session.semaphore(&main, 2).acquire(2))
                .await
                .unwrap(),
        ),
        Form::TryCampaign | Form::CampaignTimeout => Box::new(
            within(session.election(&main).campaign(b"other"))
                .await
                .unwrap(),
        ),
        Form::MultiTry | Form::MultiTimeout => {
            Box::new(within(session.mutex(&other).lock()).await.unwrap())
        }
        Form::TryWrite | Form::ReadTimeout => {
            Box::new(within(session.rwlock(&main).write()).await.unwrap())
        }
        _ => Box::new(within(session.mutex(&main).lock()).await.unwrap()),
    };
    world._held.push(Box::new(session));
    world._held.push(held);
}

type Outcome = Result<Option<()>, Error>;

fn some<T>(r: Result<Option<T>, Error>) -> Outcome {
    r.map(|g| g.map(drop))
}

/// A bounded acquire's outcome, as a future of its own.
fn boxed<T: Send + 'static>(acquire: Acquiring<Option<T>>) -> BoxFuture<'static, Outcome> {
    Box::pin(async move { some(acquire.await) })
}

/// The call of `form` by `caller`.
fn call(caller: &Caller, form: Form, names: &Names) -> BoxFuture<'static, Outcome> {
    let (main, other) = (names.main.clone(), names.other.clone());
    let bound = form.bound();
    match (caller, form) {
        (Caller::Session(s), Form::SessionTry) => {
            let f = s.try_acquire(&main, AcquireOptions::exclusive().ephemeral(true));
            Box::pin(async move { some(f.await) })
        }
        (Caller::Session(s), Form::SessionTimeout) => {
            let options = AcquireOptions::exclusive().ephemeral(true).timeout(bound);
            let f = s.acquire(&main, options);
            Box::pin(async move {
                match f.await {
                    Ok(_lease) => Ok(Some(())),
                    Err(e) if e.kind() == ErrorKind::NotAcquired => Ok(None),
                    Err(e) => Err(e),
                }
            })
        }
        (Caller::Session(s), _) => node_call(NodeRecipes::Session(s.clone()), form, main, other),
        (Caller::Manager(m), _) => node_call(NodeRecipes::Manager(m.clone()), form, main, other),
        (Caller::Space(space), _) => space_call(space, form, main, other),
    }
}

#[derive(Clone)]
enum NodeRecipes {
    Session(Session),
    Manager(SessionManager),
}

macro_rules! on {
    ($r:expr, $m:ident($($a:expr),*)) => {
        match &$r {
            NodeRecipes::Session(s) => s.$m($($a),*),
            NodeRecipes::Manager(m) => m.$m($($a),*),
        }
    };
}

fn node_call(
    r: NodeRecipes,
    form: Form,
    main: String,
    other: String,
) -> BoxFuture<'static, Outcome> {
    match form {
        Form::TryLock => {
            let f = on!(r, mutex(&main)).try_lock();
            Box::pin(async move { some(f.await) })
        }
        Form::LockTimeout => {
            let f = on!(r, mutex(&main)).lock_timeout(BOUND);
            Box::pin(async move { some(f.await) })
        }
        Form::DelayLockTimeout => {
            let f = on!(r, mutex(&main)).lock_delay(DELAY).lock_timeout(BOUND);
            Box::pin(async move { some(f.await) })
        }
        Form::SemaphoreTry => {
            let f = on!(r, semaphore(&main, 2)).try_acquire(1);
            Box::pin(async move { some(f.await) })
        }
        Form::SemaphoreTimeout => {
            let f = on!(r, semaphore(&main, 2)).acquire_timeout(1, BOUND);
            Box::pin(async move { some(f.await) })
        }
        Form::TryWrite => {
            let f = on!(r, rwlock(&main)).try_write();
            Box::pin(async move { some(f.await) })
        }
        Form::ReadTimeout => {
            let f = on!(r, rwlock(&main)).read_timeout(BOUND);
            Box::pin(async move { some(f.await) })
        }
        Form::TryCampaign => {
            let f = on!(r, election(&main)).try_campaign(b"me");
            Box::pin(async move { some(f.await) })
        }
        Form::CampaignTimeout => {
            let f = on!(r, election(&main)).campaign_timeout(b"me", BOUND);
            Box::pin(async move { some(f.await) })
        }
        Form::MultiTry => {
            let multi = on!(r, multi_lock([main, other]));
            Box::pin(async move { some(multi.try_lock().await) })
        }
        Form::MultiTimeout => {
            let multi = on!(r, multi_lock([main, other]));
            Box::pin(async move { some(multi.lock_timeout(BOUND).await) })
        }
        Form::SessionTry | Form::SessionTimeout => unreachable!("session forms"),
    }
}

fn space_call(
    space: &LockSpace,
    form: Form,
    main: String,
    other: String,
) -> BoxFuture<'static, Outcome> {
    match form {
        Form::TryLock => boxed(space.mutex(&main).try_lock()),
        Form::LockTimeout => boxed(space.mutex(&main).lock_timeout(BOUND)),
        Form::DelayLockTimeout => boxed(space.mutex(&main).lock_delay(DELAY).lock_timeout(BOUND)),
        Form::SemaphoreTry => boxed(space.semaphore(&main, 2).try_acquire(1)),
        Form::SemaphoreTimeout => boxed(space.semaphore(&main, 2).acquire_timeout(1, BOUND)),
        Form::TryWrite => boxed(space.rwlock(&main).try_write()),
        Form::ReadTimeout => boxed(space.rwlock(&main).read_timeout(BOUND)),
        Form::TryCampaign => boxed(space.election(&main).try_campaign(b"me")),
        Form::CampaignTimeout => boxed(space.election(&main).campaign_timeout(b"me", BOUND)),
        Form::MultiTry => boxed(space.multi_lock([main, other]).try_lock()),
        Form::MultiTimeout => boxed(space.multi_lock([main, other]).lock_timeout(BOUND)),
        Form::SessionTry | Form::SessionTimeout => unreachable!("session forms"),
    }
}

/// The server-side ids of the faulted caller's sessions, by node path.
async fn faulted_sessions(caller: &Caller, space_nodes: bool) -> Vec<(String, u64)> {
    match caller {
        Caller::Session(s) => vec![(NODE.to_string(), s.id())],
        Caller::Manager(m) => vec![(NODE.to_string(), within(m.current()).await.unwrap().id())],
        Caller::Space(space) if space_nodes => {
            let mut ids = Vec::new();
            for n in NODES {
                let session = within(space.manager(n).unwrap().current()).await.unwrap();
                ids.push((node_path(n), session.id()));
            }
            ids
        }
        Caller::Space(_) => Vec::new(),
    }
}

/// Runs one case; `Err` says what broke the rule.
async fn case(form: Form, at: Where, fault: Fault) -> Result<(), String> {
    let (a, transition) = reshard();
    let mut world = World::start(&transition).await;
    let layout = if at == Where::Reshard {
        &transition
    } else {
        &a
    };
    if at == Where::Reshard {
        let directory =
            SpaceDirectory::new(&world.direct, DIR, SPACE, SessionOptions::new()).unwrap();
        within(directory.init(a.clone())).await.unwrap();
        within(directory.begin_add("n3")).await.unwrap();
        world._held.push(Box::new(directory));
    }
    if fault != Fault::DirectoryStalled {
        hold(&mut world, form, at, layout).await;
    }
    let client = world.client_through(&world.proxy).await;
    let caller = match at {
        Where::Session => Caller::Session(
            within(client.session(NODE, SessionOptions::new()))
                .await
                .unwrap(),
        ),
        Where::Manager => {
            let m = client.session_manager(NODE, SessionOptions::new());
            within(m.current()).await.unwrap();
            Caller::Manager(m)
        }
        Where::Space => Caller::Space(world.space(&client, &a).await),
        Where::Reshard => {
            let dir_client = world.client_through(&world.dir_proxy).await;
            let space = world.following(&client, &dir_client).await;
            assert_eq!(space.layout().epoch(), transition.epoch());
            Caller::Space(space)
        }
    };
    // Every session of the caller is up before the fault.
    let ids = faulted_sessions(&caller, true).await;
    match fault {
        Fault::Busy | Fault::Replaced | Fault::DirectoryStalled => {}
        Fault::Stalled => world.proxy.net().stall(),
        Fault::Cut => world.proxy.net().cut(),
        Fault::Refusing => {
            world.proxy.net().refuse_for(Duration::from_secs(3600));
            world.proxy.net().cut();
        }
    }
    if fault == Fault::DirectoryStalled {
        world.dir_proxy.net().stall();
    }
    let started = Instant::now();
    let call = tokio::spawn(call(&caller, form, &world.names));
    if fault == Fault::Replaced {
        tokio::time::sleep(Duration::from_millis(50)).await;
        for (node, id) in &ids {
            world
                .emulator
                .expire_session(node.trim_start_matches("/local/"), *id);
        }
    }
    let outcome = within(call).await.unwrap();
    let took = started.elapsed();
    let bound = form.bound();
    let got = match &outcome {
        Ok(Some(())) => Some(true),
        Ok(None) => Some(false),
        Err(e) if e.kind() == ErrorKind::Unavailable => None,
        Err(e) => return Err(format!("ended with {:?} after {took:?}: {e}", e.kind())),
    };
    if got != fault.expected() {
        return Err(format!(
            "ended with {outcome:?} after {took:?}, expected {:?}",
            fault.expected()
        ));
    }
    if took > bound + SLACK {
        return Err(format!(
            "ended after {took:?}, past its bound {bound:?} and the slack"
        ));
    }
    if got == Some(false) && took + Duration::from_millis(1) < bound {
        return Err(format!(
            "\"not acquired\" after {took:?}, before its bound {bound:?}"
        ));
    }
    Ok(())
}

/// Runs every form at `at` under `faults`, and fails with every broken case at once.
async fn table(at: Where, faults: &[Fault]) {
    let mut broken = Vec::new();
    for fault in faults {
        for form in Form::ALL.into_iter().filter(|f| f.exists(at)) {
            if let Err(why) = case(form, at, *fault).await {
                broken.push(format!("{form:?} at {at:?} under {fault:?}: {why}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the bound rule is broken:\n{}",
        broken.join("\n")
    );
}

#[tokio::test(start_paused = true)]
async fn every_bounded_form_in_a_session_ends_by_its_bound() {
    table(
        Where::Session,
        &[Fault::Busy, Fault::Stalled, Fault::Cut, Fault::Refusing],
    )
    .await;
}

/// What a caller whose sessions a manager replaces meets.
const RENEWED: [Fault; 5] = [
    Fault::Busy,
    Fault::Stalled,
    Fault::Cut,
    Fault::Refusing,
    Fault::Replaced,
];

#[tokio::test(start_paused = true)]
async fn every_bounded_form_on_a_manager_ends_by_its_bound() {
    table(Where::Manager, &RENEWED).await;
}

#[tokio::test(start_paused = true)]
async fn every_bounded_form_in_a_lock_space_ends_by_its_bound() {
    table(Where::Space, &RENEWED).await;
}

#[tokio::test(start_paused = true)]
async fn every_bounded_form_in_a_reshard_ends_by_its_bound() {
    table(
        Where::Reshard,
        &[Fault::Busy, Fault::Stalled, Fault::DirectoryStalled],
    )
    .await;
}
