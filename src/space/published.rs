//! A value published under a name in a lock space: where it lives.

use super::LockSpace;
use crate::config::MAX_NAME_LEN;
use crate::error::{Error, ErrorKind, Result};
use crate::recipes::{Published, Scope, Source};

/// Where the publication `name` of `space` lives now (see [`LockSpace::published`]): the
/// source of its node and its semaphore's name there.
pub(crate) fn publication(space: &LockSpace, name: &str) -> Result<(Source, String)> {
    let shared = space.shared();
    if shared.stopped() {
        return Err(super::core::closed());
    }
    if let Some(link) = &shared.directory {
        let (manager, at) = link.publication(name);
        if at.len() > MAX_NAME_LEN {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "publication name of {} bytes is too long: with the directory's prefix {:?} the semaphore name must fit in {MAX_NAME_LEN} bytes",
                    name.len(),
                    link.value_prefix()
                ),
            ));
        }
        return Ok((Source::new(manager), at));
    }
    let layout = shared.layout.borrow().clone();
    let node = layout
        .parts(name)
        .into_iter()
        .next()
        .map(|p| p.node)
        .unwrap_or_default();
    Ok((
        Source::new(shared.manager(&node)?.clone()),
        name.to_string(),
    ))
}

impl LockSpace {
    /// A small value published under `name` in this space: the same [`Published`] as on one
    /// node, with a home that does not move when the space reshards.
    ///
    /// # Where the value lives
    ///
    /// A lock needs no history: whoever holds it next takes it where the layout places it
    /// now. A publication is the opposite, a value that outlives every session and is read
    /// long after it was written. Placed by the layout like a lock, a value written before a
    /// reshard would be left on its old node, and a coordination node cannot list its
    /// semaphores, so no step of the reshard could find every value to carry over. So a
    /// space's publications stay put:
    ///
    /// - in a space with a directory ([`LockSpaceBuilder::directory`](super::LockSpaceBuilder::directory)),
    ///   on the directory node, as the [`Published`] value `{space}/value/{name}`, through the
    ///   directory's session; every layout reads and writes the same value, before, during
    ///   and after a reshard;
    /// - in a space without one (whose layout is fixed), on the node the layout places the
    ///   name on (in a transition layout: its old place), as the [`Published`] value `name`.
    ///   A process started later with another layout looks for the value where that layout
    ///   places it.
    ///
    /// Open every process of a space the same way: one with a directory and one with a fixed
    /// layout over the same nodes read and write different values.
    ///
    /// So the directory node serves the space's publications, their reads and their
    /// subscribers' watches: keep publications for what is few and small (a configuration, a
    /// feature flag, an address), and keep per-entity state in the resource the space's locks
    /// protect.
    ///
    /// Everything else is as on one node: the last write wins, a subscriber sees the newest
    /// value, no compare-and-set (publish while leading an election for a single writer).
    /// A name that does not fit in [`MAX_NAME_LEN`] bytes with the directory's prefix is
    /// [`ErrorKind::InvalidArgument`]; every call after [`LockSpace::shutdown`] is
    /// [`ErrorKind::SessionClosed`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::space::{Layout, LockSpace};
    /// use ydb_coordination::Client;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").node("/local/dir").start().await?;
    /// let client = Client::connect(&emulator.connection_string()).await?;
    /// let space = LockSpace::builder()
    ///     .node("n1", &client, "/local/n1")
    ///     .directory(&client, "/local/dir", "billing")
    ///     .layout(Layout::new(1, ["n1"])?)
    ///     .open()
    ///     .await?;
    /// let config = space.published("config");
    /// config.publish(b"replicas=3").await?;
    /// assert_eq!(config.get().await?, b"replicas=3");
    /// # Ok(())
    /// # }
    /// ```
    pub fn published(&self, name: &str) -> Published {
        Published::new(Scope::Space(self.clone()), name)
    }
}
