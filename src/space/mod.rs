//! A lock space: lock names spread over several coordination nodes, with resharding that
//! never holds a name twice and fencing tokens that stay ordered across a move.
//!
//! A YDB coordination node is one tablet on one host: every session, semaphore and waiter of
//! the node is served there. A [`LockSpace`] places each name on one of several nodes
//! (each a [`Client`] and a path, so a space may span databases or clusters) by rendezvous
//! hashing ([`placement`]), and a lock in the space is a recipe lock on that node, taken
//! through one [`SessionManager`] per node, opened on first use and shared by everything in
//! the space. A node that is down affects only the names placed on it.
//!
//! # Resharding
//!
//! Which nodes hold the names is a [`Layout`] with an epoch. Moving from layout `A` to
//! layout `B` goes in two steps, as joint consensus does ([`Layout`]'s docs): first the
//! transition `A+B`, in which a lock is taken in the name's `A` place and then in its `B`
//! place (a counted semaphore takes its permits in both), and only when every process runs
//! `A+B`, the layout `B`. So a holder that runs `A` and one that runs `B` never coexist.
//!
//! A space with a *directory* (a coordination node, [`LockSpaceBuilder::directory`]) learns
//! its layout from a [`Published`](crate::recipes::Published) value there and follows it by itself;
//! every process of the space is a member of a [`Group`](crate::Group) there that reports
//! the oldest epoch it still runs (its layout, or a lock taken in an older one that it still
//! holds), and [`SpaceDirectory`] (the `ydb-coord space` command) advances the published
//! layout only when no member reports an older epoch than the published one. A process
//! that cannot read the layout keeps its last one and says so
//! ([`LockSpace::layout_error`]).
//!
//! # Locks live inside the membership
//!
//! With a directory, a process takes a lock only while its membership there is confirmed
//! (its member lease on the directory's session holds), and every lock it holds or is
//! taking is lost when that membership may be lost: the lease's token fires at the
//! directory session's lease-safety deadline, before the server could drop the member from
//! the list. So an operator's step never meets a lock of a process the directory does not
//! list, however long the process is cut off. A process that lost its membership joins
//! again, reads the published layout, follows it, and only then takes locks; meanwhile a
//! lock ends with [`ErrorKind::Unavailable`] at its bound (a lock without one waits). The
//! directory thus carries every lock's liveness; a space with a fixed layout has no
//! directory and none of this.
//!
//! A published layout is judged against the one run: its next step is followed; a newer
//! epoch that is not the next step (a process back from a partition) makes the locks of
//! the older layout lost and is run once they are released; the same epoch with other
//! nodes, or an older epoch (a layout written past [`SpaceDirectory`]), makes every lock
//! lost and no new one taken until the directory publishes the running layout again or a
//! newer one, with the reason in [`LockSpace::layout_error`].
//!
//! What the membership does not cover: a holder that ignores its token (stopped past its
//! lease, or still writing after it fired) is stopped by the fencing token alone, as on one
//! node; and a space group's membership and a leader read are not tied to the directory
//! membership. A leader and the members are read where every holder of the name meets (in a
//! transition, the old place until the new layout is published, then the new one).
//!
//! # Publications
//!
//! [`LockSpace::published`] is a value that does not move with the layout: on the
//! directory node when the space has one, so it reads the same before, during and after a
//! reshard ([`LockSpace::published`] says why and where).
//!
//! # Fencing
//!
//! A lock in a space carries a [`FencingToken`](crate::FencingToken), `(epoch, order id)`,
//! comparable across nodes for the same name: a holder after a move has a greater token than
//! every holder before it. A lock on one node carries the same type, with epoch 0.
//!
//! # Examples
//!
//! ```
//! # use ydb_coordination::emulator::Emulator;
//! use ydb_coordination::space::{Layout, LockSpace};
//! use ydb_coordination::Client;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
//! let client = Client::connect(&emulator.connection_string()).await?;
//! let space = LockSpace::builder()
//!     .node("n1", &client, "/local/n1")
//!     .node("n2", &client, "/local/n2")
//!     .layout(Layout::new(1, ["n1", "n2"])?)
//!     .open()
//!     .await?;
//! // The same `Mutex` as on one node, and the same guard.
//! let guard = space.mutex("charge-card-42").lock().await?;
//! let parts = guard.space_lease().ok_or("a lock in a space")?;
//! println!("held on {:?} with token {}", parts.nodes(), guard.fencing_token());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

pub(crate) mod core;
mod directory;
mod fleet;
mod layout;
mod lock;
pub mod placement;
mod published;
pub(crate) mod take;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex as StdMutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::core::{ClaimId, Effect, Entry, SpaceCore};
pub use self::directory::{SpaceDirectory, SpaceMember};
pub(crate) use self::fleet::{
    candidates, check_leader_value, election_spec, join_group, leader, members, observe_leader,
    watch_group,
};
pub use self::layout::{Lagging, Layout, Part};
pub use self::lock::SpaceLease;
pub(crate) use self::lock::{Spec, start, start_plain};
pub(crate) use self::published::publication;

use crate::client::Client;
use crate::config::SessionOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::keeper::{Keeper, Kept};
use crate::manager::SessionManager;

/// Locks over several coordination nodes: see the [module docs](self).
///
/// Cheap to clone; every clone is the same space (the same sessions, the same layout).
/// Dropping the last clone stops following the directory; [`LockSpace::shutdown`] also
/// closes the sessions.
#[derive(Debug, Clone)]
pub struct LockSpace {
    shared: Arc<Shared>,
}

/// What every clone of a space and every lock in it share: the nodes, the pure core
/// ([`core::SpaceCore`]) and what carries out its effects.
#[derive(Debug)]
pub(crate) struct Shared {
    nodes: BTreeMap<String, Node>,
    options: SessionOptions,
    state: StdMutex<State>,
    /// The layout run, for its watchers (the core's [`Effect::Layout`]).
    layout: watch::Sender<Arc<Layout>>,
    /// Bumped at every [`Effect::Gate`]: locks waiting at the gate look again.
    gate: watch::Sender<u64>,
    /// The oldest epoch the process runs (the core's [`Effect::Report`]).
    reported: watch::Sender<u64>,
    directory: Option<directory::Link>,
    /// The task that watches the held locks: a keeper of its own, of unboxed watches, since
    /// every held lock has one.
    keeper: Keeper<lock::Watch>,
    /// The task that keeps the bounded holds to their deadlines and the group memberships
    /// through their layouts.
    pub(crate) waits: Keeper<Kept>,
    /// Stops the directory's tasks when the last handle goes.
    _stop: Option<DropGuard>,
}

/// The core and the tokens of its claims, behind one lock that nothing calls out under:
/// effects are carried out after it is let go.
#[derive(Debug)]
struct State {
    core: SpaceCore,
    /// The token each claim's lock fires when the core says it is lost.
    lost: HashMap<ClaimId, CancellationToken>,
}

/// One coordination node of a space.
#[derive(Debug)]
struct Node {
    client: Client,
    path: String,
    manager: OnceLock<SessionManager>,
}

/// A lock's claim on the epoch of the layout it was taken in (see [`core`]): while it
/// lives, the process reports that epoch (or an older one). Its token fires when the lock
/// is lost by the space's account (its membership may be lost, its layout fell two epochs
/// behind or was contradicted). Dropped after the lock's release is answered.
#[derive(Debug)]
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    claim: ClaimId,
    epoch: u64,
    lost: CancellationToken,
}

impl Ticket {
    /// The token that fires when the lock is lost by the space's account.
    pub(crate) fn lost(&self) -> &CancellationToken {
        &self.lost
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let claim = self.claim;
        self.shared.with_core(|core, lost| {
            lost.remove(&claim);
            core.leave(Instant::now(), claim);
        });
    }
}

impl Shared {
    /// Runs `f` on the core (and the claims' tokens) under the lock, then carries out the
    /// effects it queued, in order, with the lock let go.
    fn with_core<R>(
        &self,
        f: impl FnOnce(&mut SpaceCore, &mut HashMap<ClaimId, CancellationToken>) -> R,
    ) -> R {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *guard;
        let out = f(&mut state.core, &mut state.lost);
        let effects = state.core.take_effects();
        let fire: Vec<CancellationToken> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Lost(claim) => state.lost.get(claim).cloned(),
                _ => None,
            })
            .collect();
        drop(guard);
        for token in fire {
            token.cancel();
        }
        for effect in effects {
            match effect {
                Effect::Lost(_) => {}
                Effect::Layout(layout) => {
                    self.layout.send_replace(layout);
                }
                Effect::Report(epoch) => {
                    self.reported.send_if_modified(|r| {
                        let changed = *r != epoch;
                        *r = epoch;
                        changed
                    });
                }
                Effect::Gate => self.gate.send_modify(|v| *v = v.wrapping_add(1)),
            }
        }
        out
    }

    /// The claim of `entry`, as a ticket whose token is known to the core's effects.
    fn ticket(self: &Arc<Self>, entry: &Entry, lost: CancellationToken) -> Ticket {
        Ticket {
            shared: self.clone(),
            claim: entry.claim,
            epoch: entry.layout.epoch(),
            lost,
        }
    }

    /// Enters the gate now: the lock's entry and ticket, or why the gate is shut.
    fn try_enter(self: &Arc<Self>) -> Result<(Entry, Ticket)> {
        let token = CancellationToken::new();
        let entry = self.with_core(|core, lost| {
            let entry = core.enter()?;
            lost.insert(entry.claim, token.clone());
            Ok::<_, Error>(entry)
        })?;
        let ticket = self.ticket(&entry, token);
        Ok((entry, ticket))
    }

    /// The layout to take a lock in, with its claim, once the gate lets a lock be taken:
    /// waited for until `deadline` (`None`: as long as it takes), then the reason the gate
    /// is shut ([`ErrorKind::Unavailable`] while the process is not a confirmed member).
    pub(crate) async fn enter(
        self: &Arc<Self>,
        deadline: Option<Instant>,
    ) -> Result<(Entry, Ticket)> {
        let mut gate = self.gate.subscribe();
        loop {
            // Marked seen before the core is asked: a change after it wakes the wait.
            gate.borrow_and_update();
            let why = match self.try_enter() {
                Ok(entered) => return Ok(entered),
                Err(why) if why.kind() == ErrorKind::SessionClosed => return Err(why),
                Err(why) => why,
            };
            let changed = match deadline {
                None => gate.changed().await,
                Some(d) => match tokio::time::timeout_at(d, gate.changed()).await {
                    Ok(changed) => changed,
                    Err(_) => return Err(why),
                },
            };
            if changed.is_err() {
                return Err(core::closed());
            }
        }
    }

    /// The layout run now and a claim on its epoch, whatever the gate says (for what the
    /// gate does not cover: a space group's membership).
    pub(crate) fn claim_now(self: &Arc<Self>) -> (Arc<Layout>, Ticket) {
        let token = CancellationToken::new();
        let entry = self.with_core(|core, lost| {
            let entry = core.claim();
            lost.insert(entry.claim, token.clone());
            entry
        });
        let layout = entry.layout.clone();
        (layout, self.ticket(&entry, token))
    }

    pub(crate) fn stopped(&self) -> bool {
        self.with_core(|core, _| core.is_stopped())
    }

    /// The session manager of the node `name`, opened on first use.
    pub(crate) fn manager(&self, name: &str) -> Result<&SessionManager> {
        let node = self.nodes.get(name).ok_or_else(|| {
            Error::new(
                ErrorKind::PreconditionFailed,
                format!("the layout names node {name:?}, which this space was not given; add it with LockSpaceBuilder::node"),
            )
        })?;
        if self.stopped() {
            return Err(core::closed());
        }
        let manager = node.manager.get_or_init(|| {
            node.client
                .session_manager(&node.path, self.options.clone())
        });
        if self.stopped() {
            // Made while the space shut down, after it stopped the managers it had.
            let late = manager.clone();
            tokio::spawn(async move { late.shutdown().await });
            return Err(core::closed());
        }
        Ok(manager)
    }

    /// The layout published now, read from the directory (`None` without one), waited for
    /// until `deadline` at the most; then [`ErrorKind::Unavailable`]. The core notes its
    /// epoch (claims two epochs behind it are lost) but does not judge it: the answer may
    /// come after the directory's watch showed a newer layout, and an older one read late
    /// is no contradiction (the watch, in the directory's order, is what the judge follows).
    pub(crate) async fn published_layout(&self, deadline: Instant) -> Result<Option<Layout>> {
        let Some(link) = &self.directory else {
            return Ok(None);
        };
        let layout = match tokio::time::timeout_at(deadline, link.read()).await {
            Ok(read) => read?,
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "the lock space's directory did not answer a read of the published layout in time; check that it is reachable",
                ));
            }
        };
        let epoch = layout.epoch();
        self.with_core(|core, _| core.seen(epoch));
        Ok(Some(layout))
    }

    /// How long a read of the directory may take when the caller gave no bound: the
    /// session timeout, past which the membership would be lost anyway.
    pub(crate) fn directory_wait(&self) -> Duration {
        self.options.get_timeout()
    }

    /// The directory's published value, read or watched: judged by the core.
    pub(crate) fn published_value(&self, value: Result<Layout>) {
        self.with_core(|core, _| core.published_value(Instant::now(), value));
    }

    /// The membership is confirmed (the published layout read after joining was handed to
    /// [`Shared::published_value`] first).
    pub(crate) fn member_confirmed(&self) {
        self.with_core(|core, _| core.member_confirmed());
    }

    /// The membership may be lost (`why`): every lock of the process is lost.
    pub(crate) fn member_lost(&self, why: Error) {
        self.with_core(|core, _| core.member_lost(why));
    }
}

/// Builds a [`LockSpace`]: its nodes, and where its layout comes from.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::space::{Layout, LockSpace};
/// # use ydb_coordination::{Client, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/n1").node("/local/dir").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let space = LockSpace::builder()
///     .node("n1", &client, "/local/n1")
///     .session_options(SessionOptions::new())
///     .directory(&client, "/local/dir", "billing")
///     .layout(Layout::new(1, ["n1"])?) // published if the directory has none yet
///     .open()
///     .await?;
/// assert_eq!(space.layout().epoch(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until opened"]
pub struct LockSpaceBuilder {
    nodes: Vec<(String, Client, String)>,
    options: SessionOptions,
    layout: Option<Layout>,
    directory: Option<(Client, String, String)>,
}

impl LockSpaceBuilder {
    /// Adds the coordination node at `path` on `client`'s database, known in layouts as
    /// `name` (what placement hashes: keep it stable when the node moves or the database
    /// is renamed).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] async fn f(client: ydb_coordination::Client) {
    /// let builder = LockSpace::builder().node("n1", &client, "/local/locks-1");
    /// # drop(builder); }
    /// ```
    pub fn node(mut self, name: &str, client: &Client, path: &str) -> Self {
        self.nodes
            .push((name.to_string(), client.clone(), path.to_string()));
        self
    }

    /// The options of every session the space opens (its nodes' and its directory's).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # use ydb_coordination::SessionOptions;
    /// use std::time::Duration;
    /// let builder = LockSpace::builder()
    ///     .session_options(SessionOptions::new().timeout(Duration::from_secs(10)));
    /// # drop(builder);
    /// ```
    pub fn session_options(mut self, options: SessionOptions) -> Self {
        self.options = options;
        self
    }

    /// The layout to run: without a directory, the fixed layout of the space; with one,
    /// the layout published there if nothing is published yet.
    ///
    /// ```
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// let builder = LockSpace::builder().layout(Layout::new(1, ["n1", "n2"])?);
    /// # drop(builder);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Learns and follows the layout from the coordination node `path` on `client`, where
    /// the space `space` keeps its published layout and its members (see
    /// [`SpaceDirectory`]).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] async fn f(client: ydb_coordination::Client) {
    /// let builder = LockSpace::builder().directory(&client, "/local/locks-dir", "billing");
    /// # drop(builder); }
    /// ```
    pub fn directory(mut self, client: &Client, path: &str, space: &str) -> Self {
        self.directory = Some((client.clone(), path.to_string(), space.to_string()));
        self
    }

    /// Opens the space: with a directory, reads its layout (publishing the builder's if
    /// none is there) and joins its members.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for no node, a node name given twice, a bad space
    /// name, or no layout (neither given nor published); [`ErrorKind::PreconditionFailed`]
    /// when the layout names a node the space was not given; the directory's errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves no member behind.
    ///
    /// See the [module docs](self) for an example.
    pub async fn open(self) -> Result<LockSpace> {
        let mut nodes = BTreeMap::new();
        for (name, client, path) in self.nodes {
            let node = Node {
                client,
                path,
                manager: OnceLock::new(),
            };
            if nodes.insert(name.clone(), node).is_some() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("node {name:?} is given twice; give each node once"),
                ));
            }
        }
        let (link, layout) = match self.directory {
            Some((client, path, space)) => {
                let link = directory::Link::new(&client, &path, &space, self.options.clone())?;
                let layout = link.read_or_publish(self.layout).await?;
                (Some(link), layout)
            }
            None => (
                None,
                self.layout.ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        "a lock space needs a layout: give one with LockSpaceBuilder::layout, or a directory",
                    )
                })?,
            ),
        };
        let core = SpaceCore::new(
            layout,
            nodes.keys().cloned(),
            link.is_some(),
            Instant::now(),
        );
        if let Some(missing) = core.missing(core.layout()) {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the layout of epoch {} names node {missing:?}, which this space was not given; add it with LockSpaceBuilder::node",
                    core.layout().epoch()
                ),
            ));
        }
        let (layout, epoch) = (core.layout().clone(), core.reported());
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            nodes,
            options: self.options,
            state: StdMutex::new(State {
                core,
                lost: HashMap::new(),
            }),
            layout: watch::Sender::new(layout),
            gate: watch::Sender::new(0),
            reported: watch::Sender::new(epoch),
            _stop: link.as_ref().map(|_| stop.clone().drop_guard()),
            directory: link,
            keeper: Keeper::default(),
            waits: Keeper::default(),
        });
        if let Some(link) = &shared.directory {
            link.start(Arc::downgrade(&shared), stop).await?;
        }
        Ok(LockSpace { shared })
    }
}

impl LockSpace {
    /// A builder: nodes, session options, a layout or a directory.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// let builder = LockSpace::builder();
    /// # drop(builder);
    /// ```
    pub fn builder() -> LockSpaceBuilder {
        LockSpaceBuilder::default()
    }

    /// The layout the space runs now.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// assert_eq!(space.layout().epoch(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn layout(&self) -> Arc<Layout> {
        self.shared.layout.borrow().clone()
    }

    /// A receiver of the layouts the space runs, the current one first.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// let mut layouts = space.layout_changes();
    /// assert_eq!(layouts.borrow_and_update().epoch(), 1);
    /// // `layouts.changed().await` wakes when the space follows a new one.
    /// # Ok(())
    /// # }
    /// ```
    pub fn layout_changes(&self) -> watch::Receiver<Arc<Layout>> {
        self.shared.layout.subscribe()
    }

    /// Why the space does not run the layout published on its directory, if it does not
    /// (a node it was not given, a value that is not a layout, a layout that contradicts
    /// the one run: then no lock is taken until it is resolved, see the
    /// [module docs](self#locks-live-inside-the-membership)). `None` when it follows.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// assert!(space.layout_error().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn layout_error(&self) -> Option<Error> {
        self.shared.with_core(|core, _| core.layout_error())
    }

    /// The oldest epoch this process runs now: its layout's, or that of a lock it took in
    /// an older layout and still holds (what it reports to the directory).
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// let guard = space.mutex("job").lock().await?;
    /// assert_eq!(space.running_epoch(), guard.fencing_token().epoch);
    /// # drop(guard);
    /// # Ok(())
    /// # }
    /// ```
    pub fn running_epoch(&self) -> u64 {
        *self.shared.reported.borrow()
    }

    /// The node `name` is placed on now (in a transition: its new place).
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// assert_eq!(space.node_of("job-7"), "n1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn node_of(&self, name: &str) -> String {
        self.layout()
            .parts(name)
            .pop()
            .map(|p| p.node)
            .unwrap_or_default()
    }

    /// The session manager of the node `node` (opened now if it was not yet), for work the
    /// space has no recipe for.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::PreconditionFailed`] for a node the space was not given.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// let manager = space.manager("n1")?;
    /// let session = manager.current().await?;
    /// # drop(session);
    /// assert!(space.manager("n9").is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn manager(&self, node: &str) -> Result<SessionManager> {
        self.shared.manager(node).cloned()
    }

    /// Closes every session of the space (its nodes' and its directory's) and stops
    /// following the directory; locks still held are released by the servers.
    ///
    /// # Cancel safety
    ///
    /// Each manager is asked to stop at once; dropping the future skips the wait.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// space.shutdown().await;
    /// let closed = space.mutex("job").lock().await;
    /// assert_eq!(closed.err().map(|e| e.kind()), Some(ydb_coordination::ErrorKind::SessionClosed));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        // Wakes the locks waiting at the gate: they end with the shutdown's error.
        self.shared.with_core(|core, _| core.stop());
        if let Some(link) = &self.shared.directory {
            link.shutdown().await;
        }
        for node in self.shared.nodes.values() {
            if let Some(manager) = node.manager.get() {
                manager.shutdown().await;
            }
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

#[cfg(test)]
mod tests;
