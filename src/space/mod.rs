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
//! layout `B` goes in two steps, as joint consensus does ([`layout`]): first the
//! transition `A+B`, in which a lock is taken in the name's `A` place and then in its `B`
//! place (a counted semaphore takes its permits in both), and only when every process runs
//! `A+B`, the layout `B`. So a holder that runs `A` and one that runs `B` never coexist.
//!
//! A space with a *directory* (a coordination node, [`LockSpaceBuilder::directory`]) learns
//! its layout from a [`Published`](crate::Published) value there and follows it by itself;
//! every process of the space is a member of a [`Group`](crate::Group) there that reports
//! the oldest epoch it still runs (its layout, or a lock taken in an older one that it still
//! holds), and [`SpaceDirectory`] (the `ydb-coord space` command) advances the published
//! layout only when no member reports an older epoch than the published one. A process
//! that cannot read the layout keeps its last one and says so
//! ([`LockSpace::layout_error`]). A lock taken two or more epochs before the published
//! layout (which a process can hold only if it was cut off from the directory while the
//! fleet moved on) is reported lost.
//!
//! # Publications
//!
//! [`LockSpace::published`] is a value that does not move with the layout: on the
//! directory node when the space has one, so it reads the same before, during and after a
//! reshard ([`SpacePublished`] says why and where).
//!
//! # Fencing
//!
//! A lock in a space carries a [`SpaceToken`], `(epoch, order id)`, comparable across nodes
//! for the same name: a holder after a move has a greater token than every holder before
//! it. Single-node recipes keep their plain `u64` token.
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
//! let guard = space.mutex("charge-card-42").lock().await?;
//! println!("held on {:?} with token {}", guard.nodes(), guard.fencing_token());
//! guard.unlock().await?;
//! # Ok(())
//! # }
//! ```

mod directory;
mod fleet;
pub mod layout;
mod lock;
pub mod placement;
mod published;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, OnceLock, PoisonError};

use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use self::directory::{SpaceDirectory, SpaceMember};
pub use self::fleet::{SpaceElection, SpaceGroup, SpaceLeader, SpaceMembership};
pub use self::layout::{Lagging, Layout, Part, SpaceToken};
pub use self::lock::{
    SpaceAcquiring, SpaceGuard, SpaceHeld, SpaceMultiLock, SpaceMutex, SpaceRwLock, SpaceSemaphore,
};
pub use self::published::SpacePublished;

use crate::client::Client;
use crate::config::SessionOptions;
use crate::error::{Error, ErrorKind, Result};
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

/// What every clone of a space and every lock in it share.
#[derive(Debug)]
pub(crate) struct Shared {
    nodes: BTreeMap<String, Node>,
    options: SessionOptions,
    layout: watch::Sender<Arc<Layout>>,
    /// The greatest epoch seen published (0: none, or no directory).
    published: AtomicU64,
    /// Set by [`LockSpace::shutdown`]: no session is opened any more.
    stopped: AtomicBool,
    /// Why the last published layout was not followed, if it was not.
    layout_error: StdMutex<Option<Error>>,
    /// The epochs of the layouts locks in progress or held were taken in.
    uses: StdMutex<BTreeMap<u64, Use>>,
    /// The oldest epoch the process runs: the layout's, or an older lock's.
    reported: watch::Sender<u64>,
    directory: Option<directory::Link>,
    /// Stops the directory's tasks when the last handle goes.
    _stop: Option<DropGuard>,
}

/// One coordination node of a space.
#[derive(Debug)]
struct Node {
    client: Client,
    path: String,
    manager: OnceLock<SessionManager>,
}

/// The locks of one epoch: how many, and the token that reports them lost.
#[derive(Debug)]
struct Use {
    count: usize,
    lost: CancellationToken,
}

/// A lock's claim on the epoch of the layout it was taken in: while it lives, the process
/// reports that epoch (or an older one). Dropped after the lock's release is answered.
#[derive(Debug)]
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    epoch: u64,
    lost: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut uses = self.shared.lock_uses();
        if let Some(u) = uses.get_mut(&self.epoch) {
            u.count -= 1;
            if u.count == 0 {
                uses.remove(&self.epoch);
            }
        }
        drop(uses);
        self.shared.report();
    }
}

impl Shared {
    fn lock_uses(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Use>> {
        self.uses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The layout to take a lock in now, and the lock's claim on its epoch.
    pub(crate) fn enter(self: &Arc<Self>) -> (Arc<Layout>, Ticket) {
        let layout = self.layout.borrow().clone();
        let epoch = layout.epoch();
        let lost = {
            let mut uses = self.lock_uses();
            let u = uses.entry(epoch).or_insert_with(|| Use {
                count: 0,
                lost: CancellationToken::new(),
            });
            u.count += 1;
            u.lost.clone()
        };
        // A lock taken in a layout already two epochs behind the published one is lost.
        if self.published.load(Ordering::Acquire) > epoch + 1 {
            lost.cancel();
        }
        self.report();
        let ticket = Ticket {
            shared: self.clone(),
            epoch,
            lost,
        };
        (layout, ticket)
    }

    /// Recomputes the epoch the process reports: the oldest of its layout's and its locks'.
    fn report(&self) {
        let current = self.layout.borrow().epoch();
        let oldest = self.lock_uses().keys().next().copied();
        let epoch = oldest.map_or(current, |o| o.min(current));
        self.reported.send_if_modified(|r| {
            let changed = *r != epoch;
            *r = epoch;
            changed
        });
    }

    /// The session manager of the node `name`, opened on first use.
    pub(crate) fn manager(&self, name: &str) -> Result<&SessionManager> {
        let node = self.nodes.get(name).ok_or_else(|| {
            Error::new(
                ErrorKind::PreconditionFailed,
                format!("the layout names node {name:?}, which this space was not given; add it with LockSpaceBuilder::node"),
            )
        })?;
        if self.stopped.load(Ordering::Acquire) {
            return Err(closed());
        }
        let manager = node.manager.get_or_init(|| {
            node.client
                .session_manager(&node.path, self.options.clone())
        });
        if self.stopped.load(Ordering::Acquire) {
            // Made while the space shut down, after it stopped the managers it had.
            let late = manager.clone();
            tokio::spawn(async move { late.shutdown().await });
            return Err(closed());
        }
        Ok(manager)
    }

    /// The epoch published now, read from the directory (`None` without one).
    pub(crate) async fn published_epoch(&self) -> Result<Option<u64>> {
        let Some(link) = &self.directory else {
            return Ok(None);
        };
        let layout = link.read().await?;
        self.seen(layout.epoch());
        Ok(Some(layout.epoch()))
    }

    /// Notes that `epoch` is published: the locks of epochs two or more behind are lost.
    fn seen(&self, epoch: u64) {
        let before = self.published.fetch_max(epoch, Ordering::AcqRel);
        if epoch <= before {
            return;
        }
        for (_, u) in self.lock_uses().range(..epoch.saturating_sub(1)) {
            u.lost.cancel();
        }
    }

    /// Follows `layout`, published on the directory, if it is newer than the one run now.
    fn follow(&self, layout: Layout) {
        self.seen(layout.epoch());
        if layout.epoch() <= self.layout.borrow().epoch() {
            return;
        }
        if let Some(missing) = layout
            .all_nodes()
            .into_iter()
            .find(|n| !self.nodes.contains_key(*n))
        {
            let err = Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the published layout of epoch {} names node {missing:?}, which this process was not given; it keeps running epoch {}",
                    layout.epoch(),
                    self.layout.borrow().epoch()
                ),
            );
            tracing::warn!(error = %err, "lock space layout not followed");
            self.set_error(Some(err));
            return;
        }
        tracing::info!(layout = %layout, "lock space follows a new layout");
        self.set_error(None);
        self.layout.send_replace(Arc::new(layout));
        self.report();
    }

    fn set_error(&self, err: Option<Error>) {
        *self
            .layout_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = err;
    }
}

/// The error of a space that was shut down.
fn closed() -> Error {
    Error::new(
        ErrorKind::SessionClosed,
        "the lock space was shut down; open a new one",
    )
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
        if let Some(missing) = layout
            .all_nodes()
            .into_iter()
            .find(|n| !nodes.contains_key(*n))
        {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the layout of epoch {} names node {missing:?}, which this space was not given; add it with LockSpaceBuilder::node",
                    layout.epoch()
                ),
            ));
        }
        let epoch = layout.epoch();
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            nodes,
            options: self.options,
            layout: watch::Sender::new(Arc::new(layout)),
            published: AtomicU64::new(if link.is_some() { epoch } else { 0 }),
            stopped: AtomicBool::new(false),
            layout_error: StdMutex::new(None),
            uses: StdMutex::new(BTreeMap::new()),
            reported: watch::Sender::new(epoch),
            _stop: link.as_ref().map(|_| stop.clone().drop_guard()),
            directory: link,
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
    /// (a node it was not given, a value that is not a layout). `None` when it follows.
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
        self.shared
            .layout_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
    /// assert_eq!(space.running_epoch(), guard.epoch());
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
        self.shared.stopped.store(true, Ordering::Release);
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
