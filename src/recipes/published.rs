//! A small value published under a name, and subscribers that follow it.

use super::Scope;
use super::follow::{Following, follow, read};
use super::{Next, Source, check_persistent};
use crate::config::{self, DescribeOptions, WatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::session::{SemaphoreDescription, Session};

/// The publication semaphore's limit (nobody acquires it).
const PUBLISHED_LIMIT: u64 = u64::MAX;

/// A small value (up to [`MAX_DATA_LEN`](crate::config::MAX_DATA_LEN) bytes) published under a
/// name: a configuration, a feature flag, the address of the current primary. Anyone can
/// [`publish`](Published::publish) a new value, [`get`](Published::get) the value now, or
/// [`subscribe`](Published::subscribe) and always converge on the newest value.
///
/// # Representation
///
/// The value is the data of one persistent semaphore named after the publication (created
/// with the first publish or subscribe; nobody acquires it): a publish is a describe (the
/// name must be a publication, not another recipe's semaphore) and an `update_semaphore`,
/// a read is a describe, a subscription is a data watch. The data is what the server stores
/// and notifies about for a semaphore, so a publish costs two round trips and a read one, a
/// publication needs no owner to stay alive (the value outlives every session) and is
/// visible to any YDB SDK as the semaphore's data. Until something is published the value
/// is empty; [`lookup`](Published::lookup) tells a name without a publication (`None`) from
/// a value published empty, as long as nobody subscribed to it (a subscription creates the
/// publication, empty).
///
/// # What it is not
///
/// There is no compare-and-set: concurrent publishers overwrite each other, and the last
/// write the server applies wins. For a single writer, publish only while leading an
/// [`Election`](super::Election), as below. A publish is not fenced: a leader that stalls
/// can still land a write after it lost the leadership, so publish under the
/// leadership's token and keep values self-describing (e.g. with a version) where a late
/// write matters. It is not a log either: subscribers see the newest value, not every one.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::{Client, SessionOptions};
/// use futures::StreamExt;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let writer = client.session_manager("/local/app", SessionOptions::new());
/// let reader = client.session_manager("/local/app", SessionOptions::new());
/// let mut config = reader.published("config").subscribe();
/// assert!(config.next().await.expect("the stream goes on")?.is_empty());
///
/// // One writer at a time: publish only as the leader.
/// let leadership = writer.election("config-writer").campaign(b"writer-1").await?;
/// let published = writer.published("config");
/// let publish = published.publish(b"replicas=3");
/// leadership.token().run_until_cancelled(publish).await.transpose()?;
///
/// while let Some(value) = config.next().await {
///     if value? == b"replicas=3" {
///         break;
///     }
/// }
/// # drop(leadership);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Published {
    scope: Scope,
    name: String,
}

/// The value in `d`.
fn value_of(d: &SemaphoreDescription, _me: u64) -> Vec<u8> {
    d.data.clone()
}

/// The value in `d`, which exists.
fn found_value_of(d: &SemaphoreDescription, me: u64) -> Option<Vec<u8>> {
    Some(value_of(d, me))
}

impl Published {
    pub(crate) fn new(scope: impl Into<Scope>, name: &str) -> Self {
        Self {
            scope: scope.into(),
            name: name.to_string(),
        }
    }

    /// Where the value lives now, and its semaphore's name there: on one node, the
    /// recipe's own; in a lock space, see [`crate::space::publication`].
    fn at(&self) -> Result<(Source, String)> {
        match &self.scope {
            Scope::Node(source) => Ok((source.clone(), self.name.clone())),
            Scope::Space(space) => crate::space::publication(space, &self.name),
        }
    }

    /// The publication's name (its semaphore's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Publishes `value`, replacing the last one; returns once the server has it.
    ///
    /// On a [`SessionManager`](crate::SessionManager) a session lost on the way is replaced and the value
    /// published in the next one.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a value over
    /// [`MAX_DATA_LEN`](crate::config::MAX_DATA_LEN) bytes or a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent);
    /// [`ErrorKind::PreconditionFailed`] when a semaphore of that name exists and is not a
    /// publication (another recipe's: a mutex's ephemeral one, another limit, one with owners such as a group's), which is
    /// left as it is; session errors (on a
    /// [`SessionManager`](crate::SessionManager): only once it stopped,
    /// [`ErrorKind::SessionClosed`] after a shutdown).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it was first polled may leave the value published or not.
    pub async fn publish(&self, value: &[u8]) -> Result<()> {
        let (source, name) = self.at()?;
        config::check_name(&name)?;
        config::check_data(value)?;
        loop {
            let session = source.session().await?;
            match publish_in(&session, &name, value).await {
                Err(e) => match source.after_error(e) {
                    Next::Retry => continue,
                    Next::End(e) => return Err(e),
                },
                ok => return ok,
            }
        }
    }

    /// The value now (empty when nothing was published).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); session errors (on a
    /// [`SessionManager`](crate::SessionManager) the read is made again in the next session
    /// instead, until the manager stops).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn get(&self) -> Result<Vec<u8>> {
        let (source, name) = self.at()?;
        read(&source, &name, DescribeOptions::new(), value_of, Vec::new()).await
    }

    /// The value now, or `None` when no semaphore has the name: nothing was published under
    /// it, and nobody subscribed to it (a [subscription](Published::subscribe) creates the
    /// publication, empty). Unlike [`get`](Published::get), it tells "never published"
    /// from a value published empty. Like `get`, it creates nothing, and it reads the data
    /// of whatever semaphore has the name ([`publish`](Published::publish) is what refuses
    /// one that is not a publication).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let manager = client.session_manager("/local/app", SessionOptions::new());
    /// let flags = manager.published("flags");
    /// assert_eq!(flags.lookup().await?, None);
    /// assert_eq!(flags.get().await?, b"");
    ///
    /// flags.publish(b"").await?;
    /// assert_eq!(flags.lookup().await?, Some(Vec::new()));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get`](Published::get).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lookup(&self) -> Result<Option<Vec<u8>>> {
        let (source, name) = self.at()?;
        read(&source, &name, DescribeOptions::new(), found_value_of, None).await
    }

    /// Follows the value: the stream yields the value now, then each new one.
    ///
    /// # Latest-value semantics
    ///
    /// - Each item is the value as of some moment, in the order the session saw them.
    /// - A subscriber that falls behind skips values and reads the newest: after any burst
    ///   of publishes, the next item is the value as the session last saw it, and the last
    ///   value is never skipped. A subscriber never reads an older value after a newer one.
    /// - Two items in a row differ (publishing the same value again yields nothing).
    /// - Across a reattach the watch is re-armed by itself; a value published while the
    ///   stream was down is the next item.
    /// - On a [`SessionManager`](crate::SessionManager) the stream carries on across a session loss without an
    ///   error item, and yields the value from the next session if it differs from the last
    ///   item. On a [`Session`](crate::Session) it ends with the session's error, on a
    ///   stopped manager with the manager's ([`ErrorKind::SessionClosed`] after a shutdown).
    /// - In a [`LockSpace`](crate::LockSpace) it follows the value where it lives (see
    ///   [`LockSpace::published`](crate::LockSpace::published)), from the node it was there
    ///   when the stream was made.
    /// - As every stream of the crate, an error item is the last one.
    ///
    /// See [`Published`] for an example.
    pub fn subscribe(&self) -> ValueStream {
        let (source, name) = match self.at() {
            Ok(at) => at,
            Err(e) => return ValueStream::failed(e),
        };
        follow(
            &source,
            &name,
            PUBLISHED_LIMIT,
            WatchOptions::data_changes(),
            value_of,
        )
    }
}

/// One attempt at publishing `value` as `name` in `session`: an update of the
/// publication's semaphore once a describe showed it is one, or a create when there is none.
async fn publish_in(session: &Session, name: &str, value: &[u8]) -> Result<()> {
    loop {
        // The owners too: a publication has none (nobody acquires it), a group has its
        // members, on a semaphore of the same limit. Listing them costs nothing for a
        // publication; only a publish onto another recipe's name pays for it.
        match session
            .describe_semaphore(name, DescribeOptions::new().owners(true))
            .await
        {
            Ok(d) => {
                // Not another recipe's semaphore (a mutex's ephemeral one would lose the
                // value with the lock, a group's would be a value nobody reads).
                check_persistent(name, &d, PUBLISHED_LIMIT)?;
                if !d.owners.is_empty() {
                    return Err(Error::new(
                        ErrorKind::PreconditionFailed,
                        format!(
                            "semaphore {:?} is held (a group's, or another recipe's), so it is not a publication; publish under another name",
                            name
                        ),
                    ));
                }
                match session.update_semaphore(name, value).await {
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    other => return other,
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match session.create_semaphore(name, PUBLISHED_LIMIT, value).await {
            // Made by someone else in between, or perhaps by us: look again.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::AlreadyExists | ErrorKind::OutcomeUnknown
                ) => {}
            other => return other,
        }
    }
}

/// The stream of [`Published::subscribe`]: the value, with latest-value semantics.
pub type ValueStream = Following<Vec<u8>>;

super::made_from!(
    published,
    Published,
    "value",
    "published and followed across session loss"
);

#[cfg(all(test, feature = "emulator"))]
mod tests {
    use crate::emulator::Emulator;
    use crate::{Client, SessionOptions};

    #[tokio::test]
    async fn lookup_tells_never_published_from_published_empty()
    -> Result<(), Box<dyn std::error::Error>> {
        let emulator = Emulator::builder().node("/local/app").start().await?;
        let client = Client::connect(&emulator.connection_string()).await?;
        let session = client.session("/local/app", SessionOptions::new()).await?;
        let published = session.published("value");
        assert_eq!(published.lookup().await?, None);
        // Looking creates nothing.
        assert_eq!(published.lookup().await?, None);
        published.publish(b"").await?;
        assert_eq!(published.lookup().await?, Some(Vec::new()));
        published.publish(b"v1").await?;
        assert_eq!(published.lookup().await?, Some(b"v1".to_vec()));
        assert_eq!(published.get().await?, b"v1");
        session.close().await;
        Ok(())
    }
}
