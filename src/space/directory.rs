//! A lock space's directory: the coordination node where its layout is published and its
//! processes report the epochs they run. [`Link`] is a process's side (follow, report);
//! [`SpaceDirectory`] the operator's (show, start and finish a reshard).

use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::layout::Layout;
use crate::client::Client;
use crate::config::SessionOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::manager::SessionManager;
use crate::recipes::{Group, Published};
use crate::session::Lease;

/// Between attempts to join the members after a failure.
const REJOIN_BACKOFF: Duration = Duration::from_secs(1);

/// What a member reports, as its group data.
#[derive(Serialize, Deserialize)]
struct Report {
    epoch: u64,
}

/// A member of a lock space: one process, as its directory sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpaceMember {
    /// The member's session on the directory node.
    pub session_id: u64,
    /// The oldest epoch the process runs (`None`: its report is not one; it counts as
    /// lagging behind every epoch).
    pub epoch: Option<u64>,
}

/// The recipes of a space `space` on its directory node.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    manager: SessionManager,
    space: String,
    layout: Published,
    members: Group,
}

impl Link {
    pub(crate) fn new(
        client: &Client,
        path: &str,
        space: &str,
        options: SessionOptions,
    ) -> Result<Self> {
        if space.is_empty() || space.len() > 256 || space.contains('/') {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("space name {space:?} must be 1 to 256 bytes without '/'"),
            ));
        }
        let manager = client.session_manager(path, options);
        Ok(Self {
            layout: manager.published(&format!("{space}/layout")),
            members: manager.group(&format!("{space}/members")),
            space: space.to_string(),
            manager,
        })
    }

    /// The directory's manager and the semaphore name of the space's publication `name`
    /// (see [`LockSpace::published`](super::LockSpace::published)).
    pub(crate) fn publication(&self, name: &str) -> (SessionManager, String) {
        (
            self.manager.clone(),
            format!("{}{name}", self.value_prefix()),
        )
    }

    /// What the names of the space's publications start with on the directory node.
    pub(crate) fn value_prefix(&self) -> String {
        format!("{}/value/", self.space)
    }

    /// The published layout.
    pub(crate) async fn read(&self) -> Result<Layout> {
        let bytes = self.layout.get().await?;
        if bytes.is_empty() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "lock space {:?} has no layout published; publish one with `ydb-coord space init`",
                    self.space
                ),
            ));
        }
        Layout::from_bytes(&bytes)
    }

    /// The published layout, or `initial` published first when there is none.
    pub(crate) async fn read_or_publish(&self, initial: Option<Layout>) -> Result<Layout> {
        match (self.read().await, initial) {
            (Err(e), Some(initial)) if e.kind() == ErrorKind::NotFound => {
                self.under_admin_lock(|current| async move {
                    match current {
                        Some(current) => Ok((current, false)),
                        None => Ok((initial, true)),
                    }
                })
                .await
            }
            (read, _) => read,
        }
    }

    /// The members and the epochs they report.
    pub(crate) async fn members(&self) -> Result<Vec<SpaceMember>> {
        Ok(self
            .members
            .members()
            .await?
            .into_iter()
            .map(|m| SpaceMember {
                session_id: m.session_id,
                epoch: serde_json::from_slice::<Report>(&m.data)
                    .ok()
                    .map(|r| r.epoch),
            })
            .collect())
    }

    /// Runs `step` (from the published layout, if any, to the layout to publish and whether
    /// to publish it) while holding the space's admin lock, so two operators' steps never
    /// interleave; returns the layout published at the end.
    async fn under_admin_lock<F, Fut>(&self, step: F) -> Result<Layout>
    where
        F: FnOnce(Option<Layout>) -> Fut,
        Fut: std::future::Future<Output = Result<(Layout, bool)>>,
    {
        let admin = self.manager.mutex(&format!("{}/admin", self.space));
        let Some(guard) = admin.lock_timeout(SpaceDirectory::ADMIN_WAIT).await? else {
            return Err(Error::new(
                ErrorKind::NotAcquired,
                format!(
                    "another operator's step on lock space {:?} held its admin lock for {:?}; try again",
                    self.space,
                    SpaceDirectory::ADMIN_WAIT
                ),
            ));
        };
        let current = match self.read().await {
            Ok(layout) => Some(layout),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let (next, publish) = step(current).await?;
        if publish {
            if guard.is_lost() {
                return Err(Error::new(
                    ErrorKind::Aborted,
                    "the directory's admin lock was lost during the step; nothing was published, try again",
                ));
            }
            self.layout.publish(&next.to_bytes()).await?;
        }
        let _ = guard.unlock().await;
        Ok(next)
    }

    /// Starts following the published layout and keeping the process a member reporting
    /// the epoch of `shared`, after joining the members once (so the process is seen
    /// before it takes a lock) and opening the gate to locks.
    pub(crate) async fn start(&self, shared: Weak<Shared>, stop: CancellationToken) -> Result<()> {
        let reported = match shared.upgrade() {
            Some(s) => s.reported.subscribe(),
            None => return Ok(()),
        };
        let epoch = *reported.borrow();
        let member = self.members.member_lease(&report(epoch)).await?;
        self.confirm(&shared, &member).await?;
        tokio::spawn(self.clone().follow(shared.clone(), stop.clone()));
        tokio::spawn(
            self.clone()
                .keep_member(shared, reported, member, epoch, stop),
        );
        Ok(())
    }

    /// Confirms the membership `member` to the gate, once the layout read after joining is
    /// followed: the layout read before may have been succeeded by one whose step counted
    /// the members without this process, so read it again now that the process is one,
    /// and it never runs a layout older than the published one's predecessor.
    async fn confirm(&self, shared: &Weak<Shared>, member: &Lease) -> Result<()> {
        let layout = self.read().await?;
        if let Some(shared) = shared.upgrade() {
            shared.published_value(Ok(layout));
            if !member.is_lost() {
                shared.member_confirmed();
            }
        }
        Ok(())
    }

    /// The task that follows the published layout.
    async fn follow(self, shared: Weak<Shared>, stop: CancellationToken) {
        let mut values = self.layout.subscribe();
        loop {
            let next = tokio::select! {
                biased;
                () = stop.cancelled() => return,
                next = values.next() => next,
            };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            match next {
                Some(Ok(bytes)) => {
                    let value = Layout::from_bytes(&bytes);
                    if let Err(e) = &value {
                        tracing::warn!(error = %e, "lock space layout unreadable; the last one stays");
                    }
                    shared.published_value(value);
                }
                Some(Err(e)) => {
                    shared.published_value(Err(e));
                    return;
                }
                None => return,
            }
        }
    }

    /// The task that keeps the process a member reporting the epoch in `reported`: one
    /// lease whose data changes in place with the epoch (it only grows: a member never
    /// reports an older epoch than before). When the lease may be lost (its token fires at
    /// the directory session's lease-safety deadline, before the server could drop the
    /// member), the gate shuts, which every lock of the process follows; the task joins
    /// again, reads the layout, and only then opens the gate.
    async fn keep_member(
        self,
        shared: Weak<Shared>,
        mut reported: tokio::sync::watch::Receiver<u64>,
        mut member: Lease,
        mut epoch: u64,
        stop: CancellationToken,
    ) {
        loop {
            let lost = member.token();
            let want = *reported.borrow_and_update();
            if want != epoch && !lost.is_cancelled() {
                let update = tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    () = lost.cancelled() => continue,
                    update = member.data_update(&report(want)) => update,
                };
                match update {
                    Ok(()) => epoch = want,
                    Err(e) => {
                        tracing::warn!(error = %e, "lock space could not report its epoch; trying again");
                        tokio::select! {
                            biased;
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(REJOIN_BACKOFF) => {}
                        }
                    }
                }
                continue;
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = lost.cancelled() => {}
                changed = reported.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    continue;
                }
            }
            // The membership may be lost: no lock until the process is a member again.
            match shared.upgrade() {
                Some(s) => s.member_lost(Error::new(
                    ErrorKind::Unavailable,
                    "this process's membership in the lock space's directory may have been lost (no contact within the session timeout); its locks were reported lost, and it takes none until it is a member again",
                )),
                None => return,
            }
            drop(member);
            (member, epoch) = match self.rejoin(&shared, &reported, &stop).await {
                Some(joined) => joined,
                None => return,
            };
        }
        let _ = member.release().await;
    }

    /// Joins the members again after a lapse, reporting the epoch run now, and confirms the
    /// membership: the lease and the epoch it reports; `None` once the space stops.
    async fn rejoin(
        &self,
        shared: &Weak<Shared>,
        reported: &tokio::sync::watch::Receiver<u64>,
        stop: &CancellationToken,
    ) -> Option<(Lease, u64)> {
        loop {
            let epoch = *reported.borrow();
            let attempt = async {
                let member = self.members.member_lease(&report(epoch)).await?;
                self.confirm(shared, &member).await?;
                Ok::<_, Error>((member, epoch))
            };
            let joined = tokio::select! {
                biased;
                () = stop.cancelled() => return None,
                joined = attempt => joined,
            };
            match joined {
                Ok(member) => return Some(member),
                Err(e) if self.manager.is_stopped() => {
                    tracing::debug!(error = %e, "lock space directory stopped");
                    return None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lock space could not join its directory again; trying again");
                    tokio::select! {
                        biased;
                        () = stop.cancelled() => return None,
                        () = tokio::time::sleep(REJOIN_BACKOFF) => {}
                    }
                }
            }
        }
    }

    pub(crate) async fn shutdown(&self) {
        self.manager.shutdown().await;
    }
}

fn report(epoch: u64) -> Vec<u8> {
    serde_json::to_vec(&Report { epoch }).unwrap_or_default()
}

/// A lock space's directory, for the operator: the published layout, the members and
/// the epochs they run, and the steps of a reshard, each refused while a member lags.
///
/// A reshard from `A` to `B` is two steps: [`SpaceDirectory::begin`] publishes the
/// transition `A+B`; once every member runs it, [`SpaceDirectory::finish`] publishes `B`.
/// Each step holds the space's admin lock on the directory, so operators' steps never
/// interleave, and checks the members first: none may run an epoch older than the
/// current layout's ([`Layout::lagging`]).
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use ydb_coordination::space::{Layout, SpaceDirectory};
/// # use ydb_coordination::{Client, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/dir").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let directory = SpaceDirectory::new(&client, "/local/dir", "billing", SessionOptions::new())?;
/// directory.init(Layout::new(1, ["n1", "n2"])?).await?;
/// let moving = directory.begin_add("n3").await?; // no member lags: published
/// assert_eq!(moving.epoch(), 2);
/// let done = directory.finish().await?;
/// assert_eq!(done.nodes(), ["n1", "n2", "n3"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SpaceDirectory {
    link: Link,
}

impl SpaceDirectory {
    /// How long a step ([`init`](Self::init), [`begin`](Self::begin), [`finish`](Self::finish),
    /// ...) waits for the directory's admin lock while another operator's step holds it,
    /// before it fails with [`ErrorKind::NotAcquired`]: bound a step by more than this.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ydb_coordination::space::SpaceDirectory;
    /// assert_eq!(SpaceDirectory::ADMIN_WAIT, Duration::from_secs(30));
    /// ```
    pub const ADMIN_WAIT: Duration = Duration::from_secs(30);

    /// The directory of the space `space` on the coordination node `path`. Call it within
    /// a Tokio runtime: it starts the session manager of the directory node.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a space name that is empty, over 256 bytes or has
    /// a `/`.
    pub fn new(client: &Client, path: &str, space: &str, options: SessionOptions) -> Result<Self> {
        Ok(Self {
            link: Link::new(client, path, space, options)?,
        })
    }

    /// The published layout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] when none is published; [`ErrorKind::InvalidArgument`] when
    /// the value is not a layout; session errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn layout(&self) -> Result<Layout> {
        self.link.read().await
    }

    /// The members now, each with the epoch it reports.
    ///
    /// # Errors
    ///
    /// Session errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn members(&self) -> Result<Vec<SpaceMember>> {
        self.link.members().await
    }

    /// Publishes the first layout of the space.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::AlreadyExists`] when another layout is published (the same one is
    /// fine); session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the layout published or not.
    pub async fn init(&self, layout: Layout) -> Result<Layout> {
        self.link
            .under_admin_lock(|current| async move {
                match current {
                    Some(current) if current == layout => Ok((current, false)),
                    Some(current) => Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("the space already has the layout {current}; reshard it instead"),
                    )),
                    None => Ok((layout, true)),
                }
            })
            .await
    }

    /// Starts a reshard to the nodes `nodes`: publishes the transition from the published
    /// (stable) layout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::PreconditionFailed`] when a member still runs an older epoch than the
    /// published one, or the published layout is a transition; as [`Layout::begin`];
    /// session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the transition published or not.
    pub async fn begin<S: AsRef<str>>(&self, nodes: impl IntoIterator<Item = S>) -> Result<Layout> {
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_string()).collect();
        self.step(move |current| current.begin(nodes)).await
    }

    /// Starts a reshard that adds `node` (see [`SpaceDirectory::begin`]).
    ///
    /// # Errors
    ///
    /// As [`SpaceDirectory::begin`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceDirectory::begin`].
    pub async fn begin_add(&self, node: &str) -> Result<Layout> {
        self.step(|current| current.add_node(node)).await
    }

    /// Starts a reshard that removes `node` (see [`SpaceDirectory::begin`]).
    ///
    /// # Errors
    ///
    /// As [`SpaceDirectory::begin`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceDirectory::begin`].
    pub async fn begin_remove(&self, node: &str) -> Result<Layout> {
        self.step(|current| current.remove_node(node)).await
    }

    /// Finishes the reshard in progress: publishes the new layout, once every member runs
    /// the transition.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::PreconditionFailed`] while a member still runs the old layout (or a lock
    /// taken in it), or when no reshard is in progress; session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the new layout published or not.
    pub async fn finish(&self) -> Result<Layout> {
        self.step(Layout::finish).await
    }

    /// The members that run an epoch older than the published one, oldest first: what a
    /// step waits for.
    ///
    /// # Errors
    ///
    /// As [`SpaceDirectory::layout`] and [`SpaceDirectory::members`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lagging(&self) -> Result<Vec<super::Lagging>> {
        let layout = self.layout().await?;
        let members = self.members().await?;
        Ok(layout.lagging(epochs(&members)))
    }

    /// Closes the directory's session.
    ///
    /// # Cancel safety
    ///
    /// The manager is asked to stop at once; dropping the future skips the wait.
    pub async fn shutdown(&self) {
        self.link.shutdown().await;
    }

    /// One step from the published layout to `next(published)`, checked against the
    /// members.
    async fn step(&self, next: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Layout> {
        let link = self.link.clone();
        self.link
            .under_admin_lock(|current| async move {
                let current = current.ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotFound,
                        "the space has no layout published; publish one with `ydb-coord space init`",
                    )
                })?;
                let next = next(&current)?;
                let members = link.members().await?;
                current.check_advance(&next, epochs(&members))?;
                Ok((next, true))
            })
            .await
    }
}

/// The (session, epoch) pairs of `members`; one that reports no epoch runs epoch 0.
fn epochs(members: &[SpaceMember]) -> Vec<(u64, u64)> {
    members
        .iter()
        .map(|m| (m.session_id, m.epoch.unwrap_or(0)))
        .collect()
}
