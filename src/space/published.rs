//! A value published under a name in a lock space.

use super::LockSpace;
use crate::config::MAX_NAME_LEN;
use crate::error::{Error, ErrorKind, Result};
use crate::recipes::{Published, ValueStream};

/// A small value published under a name in a [`LockSpace`]: [`Published`] with a home
/// that does not move when the space reshards.
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
/// Everything else is [`Published`]'s: the last write wins, a subscriber sees the newest
/// value, no compare-and-set (publish while leading a [`SpaceElection`](super::SpaceElection)
/// for a single writer).
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
#[derive(Debug, Clone)]
pub struct SpacePublished {
    space: LockSpace,
    name: String,
}

impl SpacePublished {
    /// The publication's name in the space.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) {
    /// assert_eq!(space.published("config").name(), "config");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The [`Published`] value behind this one (see [where it lives](SpacePublished#where-the-value-lives)).
    fn target(&self) -> Result<Published> {
        let shared = self.space.shared();
        if shared.stopped() {
            return Err(super::core::closed());
        }
        if let Some(link) = &shared.directory {
            let published = link.published(&self.name);
            if published.name().len() > MAX_NAME_LEN {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "publication name of {} bytes is too long: with the directory's prefix {:?} the semaphore name must fit in {MAX_NAME_LEN} bytes",
                        self.name.len(),
                        link.value_prefix()
                    ),
                ));
            }
            return Ok(published);
        }
        let layout = shared.layout.borrow().clone();
        let node = layout
            .parts(&self.name)
            .into_iter()
            .next()
            .map(|p| p.node)
            .unwrap_or_default();
        Ok(shared.manager(&node)?.published(&self.name))
    }

    /// Publishes `value`, replacing the last one; returns once the server has it.
    ///
    /// # Errors
    ///
    /// As [`Published::publish`]; [`ErrorKind::InvalidArgument`] also for a name that
    /// does not fit in [`MAX_NAME_LEN`] bytes with the directory's prefix;
    /// [`ErrorKind::SessionClosed`] after [`LockSpace::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it was first polled may leave the value published or not.
    ///
    /// See [`SpacePublished`] for an example.
    pub async fn publish(&self, value: &[u8]) -> Result<()> {
        self.target()?.publish(value).await
    }

    /// The value now (empty when nothing was published).
    ///
    /// # Errors
    ///
    /// As [`Published::get`], and as [`SpacePublished::publish`] for the name and a space
    /// that was shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// See [`SpacePublished`] for an example.
    pub async fn get(&self) -> Result<Vec<u8>> {
        self.target()?.get().await
    }

    /// The value now, or `None` when the name has no publication, as
    /// [`Published::lookup`]: it tells "never published" from a value published empty.
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
    /// let mode = space.published("mode");
    /// assert_eq!(mode.lookup().await?, None);
    /// mode.publish(b"").await?;
    /// assert_eq!(mode.lookup().await?, Some(Vec::new()));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`SpacePublished::get`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lookup(&self) -> Result<Option<Vec<u8>>> {
        self.target()?.lookup().await
    }

    /// Follows the value: the value now, then each new one, with [`Published::subscribe`]'s
    /// latest-value semantics. A name that does not fit, or a space that was shut down,
    /// yields its error and ends.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").node("/local/dir").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .directory(&client, "/local/dir", "billing")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// let mut flags = space.published("flags").subscribe();
    /// assert!(flags.next().await.expect("the stream goes on")?.is_empty());
    /// space.published("flags").publish(b"dark-mode").await?;
    /// while let Some(value) = flags.next().await {
    ///     if value? == b"dark-mode" {
    ///         break;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self) -> ValueStream {
        match self.target() {
            Ok(published) => published.subscribe(),
            Err(e) => ValueStream::failed(e),
        }
    }
}

impl LockSpace {
    /// The [`SpacePublished`] value `name`.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.published("config");
    /// # }
    /// ```
    pub fn published(&self, name: &str) -> SpacePublished {
        SpacePublished {
            space: self.clone(),
            name: name.to_string(),
        }
    }
}
