//! Leader election with observation.

use std::sync::Arc;
use std::time::Duration;

use super::follow::{Follow, Following, Spec, read};
use super::{Acquiring, Held, Holding, Scope, Source, lease_guard, take_lock};
use crate::config::{DescribeOptions, WatchOptions};
use crate::error::Result;
use crate::session::{FencingToken, Lease, SemaphoreDescription};

/// Leader election on a persistent semaphore with one token (created if missing): the
/// owner is the leader and its owner data is the leader's value. Candidates queue in FIFO
/// order; observers follow changes through an owner watch.
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
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// let election = session.election("scheduler");
/// let leadership = election.campaign(b"host-a:8080").await?;
/// let leader = election.leader().await?.expect("we lead");
/// assert_eq!(leader.data, b"host-a:8080");
/// leadership.set_data(b"host-a:9090").await?;
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    scope: Scope,
    name: String,
}

/// The current leader of an [`Election`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's value (its owner data).
    pub data: Vec<u8>,
    /// The leader's session.
    pub session_id: u64,
    /// The leader's fencing token (epoch 0: one node).
    pub fencing_token: FencingToken,
    /// Whether the leader is the session that asked: the recipe's session (on a
    /// [`SessionManager`](crate::SessionManager), the session current when the answer
    /// came; in a [`LockSpace`](crate::LockSpace), this process's session on the node it
    /// was read on).
    pub is_me: bool,
    /// In a [`LockSpace`](crate::LockSpace), the node it was read on: the place where
    /// every leader holds the election now; `None` on one node.
    pub node: Option<String>,
}

/// A candidate of an [`Election`], from [`Election::candidates`]: the leader or a waiter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The candidate's value (its owner or waiter data).
    pub data: Vec<u8>,
    /// The candidate's session.
    pub session_id: u64,
    /// The leader's fencing token; for a waiter, the token it will lead with (grants
    /// happen in increasing order). On one node its epoch is 0; in a
    /// [`LockSpace`](crate::LockSpace) it carries the layout's epoch, as the space leader's
    /// own token does.
    pub fencing_token: FencingToken,
    /// Whether this candidate is the leader (only the first can be).
    pub is_leader: bool,
    /// Whether the candidate is the session that asked (as [`Leader::is_me`]).
    pub is_me: bool,
}

/// Being the leader, on one node or in a [`LockSpace`](crate::LockSpace): `token()` fires
/// when leadership ends or may have been lost, `set_data()` proclaims a new value, and
/// dropping it resigns.
///
/// The election's semaphore is persistent, so it can be force-deleted under the leader
/// (`delete_semaphore(name, true)`), which the server tells no owner. The leader's session
/// watches it (a data watch: it does not fire when candidates come and go) and the token
/// fires within one trip of the server's notice of the delete to this session (a notice
/// lost with a broken stream: at the reattach, from a describe of the owners). Another
/// candidate can be granted the semaphore made anew within that window, since its grant
/// and this notice travel on different streams: the fencing token orders them (the new
/// leader's is greater), so the protected resource must check it.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns"]
pub struct Leadership {
    held: Holding,
}

lease_guard!(Leadership, "leadership", resign);

/// The leader in `d`, as seen from the session `me`.
fn leader_of(d: &SemaphoreDescription, me: u64) -> Option<Leader> {
    d.owners.first().map(|o| Leader {
        data: o.data.clone(),
        session_id: o.session_id,
        fencing_token: FencingToken::new(0, o.order_id),
        is_me: o.session_id == me,
        node: None,
    })
}

/// The queue in `d` (the leader, then the waiters), as seen from the session `me`.
fn candidates_of(d: &SemaphoreDescription, me: u64) -> Vec<Candidate> {
    let owners = d.owners.iter().take(1).map(|o| (o, true));
    let waiters = d.waiters.iter().map(|w| (w, false));
    owners
        .chain(waiters)
        .map(|(c, is_leader)| Candidate {
            data: c.data.clone(),
            session_id: c.session_id,
            fencing_token: FencingToken::new(0, c.order_id),
            is_leader,
            is_me: c.session_id == me,
        })
        .collect()
}

impl Election {
    pub(crate) fn new(scope: impl Into<Scope>, name: &str) -> Self {
        Self {
            scope: scope.into(),
            name: name.to_string(),
        }
    }

    /// A campaign with `data` (waiting at most `timeout`).
    fn start(&self, data: &[u8], timeout: Option<Duration>) -> Acquiring<Option<Leadership>> {
        if matches!(self.scope, Scope::Space(_))
            && let Err(e) = crate::space::check_leader_value(data)
        {
            return Acquiring::failed(e);
        }
        let spec = crate::space::election_spec(data);
        take_lock(&self.scope, &self.name, spec, timeout, false, |held| {
            Leadership { held }
        })
    }

    /// Waits to become the leader, with `data` as the leader's value.
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether someone else
    /// leads ([`Acquiring::queued`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); [`ErrorKind::PreconditionFailed`](crate::ErrorKind::PreconditionFailed) when a
    /// semaphore of that name exists with another limit; session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the candidacy.
    pub fn campaign(&self, data: &[u8]) -> Acquiring<Leadership> {
        self.start(data, None).expect_some()
    }

    /// Becomes the leader only if nobody leads or waits now; `None` otherwise.
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
    /// let a = client.session("/local/app", SessionOptions::new()).await?;
    /// let b = client.session("/local/app", SessionOptions::new()).await?;
    /// let leadership = a.election("scheduler").try_campaign(b"a").await?;
    /// assert!(leadership.is_some());
    /// assert!(b.election("scheduler").try_campaign(b"b").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub fn try_campaign(&self, data: &[u8]) -> Acquiring<Option<Leadership>> {
        self.campaign_timeout(data, Duration::ZERO)
    }

    /// Waits to become the leader at most `timeout` (for a session too, on a manager without one); `None` if it
    /// passed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let election = session.election("scheduler");
    /// match election.campaign_timeout(b"host-a", Duration::from_secs(5)).await? {
    ///     Some(leadership) => leadership.resign().await?,
    ///     None => return Ok(()), // someone else leads
    /// };
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub fn campaign_timeout(
        &self,
        data: &[u8],
        timeout: Duration,
    ) -> Acquiring<Option<Leadership>> {
        self.start(data, Some(timeout))
    }

    /// Stays a candidate for as long as the stream is polled: a [`Leadership`] each time this
    /// process becomes the leader, again after a lost leadership or a resignation. See
    /// [`Held`].
    pub fn hold(&self, data: &[u8]) -> Held<Leadership> {
        let election = self.clone();
        let data = data.to_vec();
        Held::new(
            format!("election {:?}", self.name),
            Arc::new(move || Box::pin(election.campaign(&data))),
            |g| g.lease().map(Lease::session_id),
        )
    }

    /// The current leader, or `None`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); session errors (on a
    /// [`SessionManager`](crate::SessionManager) the read is made again in the next session
    /// instead, until the manager stops).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        match &self.scope {
            Scope::Node(source) => leader_on(source, &self.name).await,
            Scope::Space(space) => crate::space::leader(space, &self.name).await,
        }
    }

    /// The queue: the leader first (when someone leads), then the waiting candidates in the
    /// server's FIFO order, each with its value, from one describe of owners and waiters.
    /// Empty when nobody leads or waits.
    ///
    /// A snapshot: by the time it returns the queue may have moved on.
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
    /// let a = client.session("/local/app", SessionOptions::new()).await?;
    /// let b = client.session("/local/app", SessionOptions::new()).await?;
    /// let leadership = a.election("scheduler").campaign(b"host-a").await?;
    /// let mut waiting = b.election("scheduler").campaign(b"host-b");
    /// assert!(waiting.queued().await);
    ///
    /// let queue = a.election("scheduler").candidates().await?;
    /// let values: Vec<&[u8]> = queue.iter().map(|c| c.data.as_slice()).collect();
    /// assert_eq!(values, [b"host-a".as_slice(), b"host-b"]);
    /// assert!(queue[0].is_leader && queue[0].is_me);
    /// assert!(!queue[1].is_leader && !queue[1].is_me);
    /// # drop((leadership, waiting));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); session errors (on a
    /// [`SessionManager`](crate::SessionManager) the read is made again in the next session
    /// instead, until the manager stops).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn candidates(&self) -> Result<Vec<Candidate>> {
        match &self.scope {
            Scope::Node(source) => candidates_on(source, &self.name).await,
            Scope::Space(space) => crate::space::candidates(space, &self.name).await,
        }
    }

    /// Follows the leader: the stream yields the leader now (or `None` when nobody leads),
    /// then the new state when it changes (a new leader, a new value, or nobody), coalescing
    /// changes as described below.
    ///
    /// # Latest-state semantics
    ///
    /// The stream reports states, not events:
    ///
    /// - Each item is the leader (or `None`) as of some moment, in the order the session saw
    ///   them.
    /// - After any burst of changes, the next item read reflects the newest state the session
    ///   has seen. Intermediate leaders may be skipped (coalesced) when changes come faster
    ///   than the stream is read, e.g. a short tenure between two reads; the final state
    ///   never is. A reader that falls behind jumps to the present rather than replaying the
    ///   past.
    /// - Consecutive duplicates are not repeated: two items in a row differ.
    /// - The stream re-arms across reattaches of the session by itself.
    ///
    /// So don't count items or expect to see every leader: wait for the state you care
    /// about. [`Leader::is_me`] tells whether the leader is the session watching; use
    /// [`Leadership`] (its token) to learn that *you* lost the leadership.
    ///
    /// On a [`SessionManager`](crate::SessionManager) scope the stream carries on across a
    /// session loss without an error item, and yields the leader as the next session sees
    /// it if it differs from the last item; on a session scope it ends with the session's
    /// error, and once the manager stops with the manager's
    /// ([`ErrorKind::SessionClosed`](crate::ErrorKind::SessionClosed) after a shutdown). As
    /// every stream of the crate, an error item is the last one. In a
    /// [`LockSpace`](crate::LockSpace) it follows the place where every leader holds the
    /// election through reshards, and also ends with an error reading the directory in a
    /// transition.
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
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let election = session.election("scheduler");
    /// let mut leaders = election.observe();
    /// let now = leaders.next().await.expect("the stream goes on")?;
    /// assert!(now.is_none());
    ///
    /// let leadership = election.campaign(b"host-a:8080").await?;
    /// leadership.set_data(b"host-a:9090").await?;
    /// leadership.resign().await?;
    ///
    /// // Both leader values may have been coalesced away by now, but not the final state:
    /// // read until nobody leads.
    /// while let Some(leader) = leaders.next().await {
    ///     match leader? {
    ///         Some(leader) => println!("leader: {:?}", leader.data),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self) -> LeaderStream {
        let source = match &self.scope {
            Scope::Node(source) => source,
            Scope::Space(space) => {
                return Following::new(crate::space::observe_leader(space, &self.name));
            }
        };
        let spec = Spec {
            name: self.name.clone(),
            limit: 1,
            watch: WatchOptions::owners_changes(),
            view: leader_of,
        };
        Follow::stream(source.clone(), spec)
    }
}

/// The stream of [`Election::observe`]: the leader (or `None`) with latest-state semantics.
/// A slow reader may miss intermediate leaders but always gets the newest state; two items
/// in a row never repeat the same state. See [`Election::observe`].
pub type LeaderStream = Following<Option<Leader>>;

/// The leader of the election `name` on the node of `source`.
pub(crate) async fn leader_on(source: &Source, name: &str) -> Result<Option<Leader>> {
    let options = DescribeOptions::new().owners(true);
    read(source, name, options, leader_of, None).await
}

/// The candidates of the election `name` on the node of `source`.
pub(crate) async fn candidates_on(source: &Source, name: &str) -> Result<Vec<Candidate>> {
    let options = DescribeOptions::new().owners(true).waiters(true);
    read(source, name, options, candidates_of, Vec::new()).await
}
