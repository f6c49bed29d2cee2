//! Several locks of one node, taken all-or-nothing.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{Guard, Next, Scope, Source, in_space};
use crate::bound::RoundTrips;
use crate::config::{self, AcquireOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::manager::SessionManager;
use crate::session::{Acquiring, FencingToken, Lease, Session};
use crate::space::SpaceLease;

/// Several [`Mutex`](super::Mutex)es taken together: all of them or none, under one
/// deadline, behind one guard; on one node held in one session, in a
/// [`LockSpace`](crate::LockSpace) each in its places, the names possibly on different nodes
/// (there one global order holds whichever layout of a reshard a process runs, and what a
/// space lock may meet is as for [`Mutex::lock`](super::Mutex::lock)).
///
/// The locks are taken one after the other in a canonical order (the names sorted, each
/// once), whatever order they were given in. So two processes asking for overlapping sets,
/// `{a, b}` and `{b, a}`, both go for `a` first and cannot deadlock: whoever gets `a`
/// gets `b` too, the other waits for `a`. Each part is the same lock as
/// `session.mutex(name)`, so a multi-lock and single mutexes of those names exclude each
/// other.
///
/// If the locks cannot all be had (the deadline passed, an error), those already taken are
/// released before the call returns: it waits for the server to confirm (at most 2 s, and
/// for a `_timeout` form within its bound: see [`Acquiring`]'s bounds), so another session
/// that asks next finds them free. On a [`SessionManager`] a session lost half-way
/// releases everything (the server does) and starts over in the next session, keeping the
/// deadline.
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
/// // Move money between two accounts: both rows locked, in whatever order named.
/// let guard = session.multi_lock(["account-42", "account-7"]).lock().await?;
/// assert_eq!(guard.names(), ["account-42", "account-7"]); // the canonical order
/// let transfer = async { /* debit one, credit the other */ };
/// if guard.token().run_until_cancelled(transfer).await.is_none() {
///     eprintln!("a lock was lost; stopped");
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    scope: Scope,
    /// Sorted, each once.
    names: Vec<String>,
    data: Vec<u8>,
}

/// Every lock of a [`MultiLock`], held in one session (or in their places in a
/// [`LockSpace`](crate::LockSpace)); dropping it releases them all.
///
/// Its [`token`](MultiLockGuard::token) fires as soon as any part is lost (or the guard is
/// unlocked or dropped). On one node the parts share that token, which their session fires
/// when any of them ends: a held multi-lock costs no task. In a lock space it is the
/// [`SpaceLease`]'s.
#[derive(Debug)]
#[must_use = "dropping the guard unlocks every lock"]
pub struct MultiLockGuard {
    parts: Parts,
}

/// What a multi-lock holds: its leases in one session, or its parts in a lock space.
#[derive(Debug)]
enum Parts {
    Node {
        /// Fires `token` when the guard is dropped, before the leases drop and release
        /// (fields drop in order).
        _fire: DropGuard,
        leases: Vec<Lease>,
        token: CancellationToken,
    },
    Space(SpaceLease),
}

/// A token that fires when any of `tokens` does, or when it is cancelled itself (which also
/// ends the task that watches the others): for parts whose tokens were made before they
/// could share one.
fn any_of(tokens: Vec<CancellationToken>) -> CancellationToken {
    let any = CancellationToken::new();
    let fire = any.clone();
    tokio::spawn(async move {
        let parts =
            futures::future::select_all(tokens.into_iter().map(|t| Box::pin(t.cancelled_owned())));
        tokio::select! {
            _ = parts => fire.cancel(),
            () = fire.cancelled() => {}
        }
    });
    any
}

impl MultiLockGuard {
    fn new(leases: Vec<Lease>) -> Self {
        let token = Lease::one_token(&leases)
            .unwrap_or_else(|| any_of(leases.iter().map(Lease::token).collect()));
        Self {
            parts: Parts::Node {
                _fire: token.clone().drop_guard(),
                leases,
                token,
            },
        }
    }

    /// A token that fires when any of the locks is lost, released or dropped. Do the
    /// protected work under it; cancelling it stops only that work, never the locks.
    pub fn token(&self) -> CancellationToken {
        match &self.parts {
            Parts::Node { token, .. } => token.child_token(),
            Parts::Space(space) => space.token(),
        }
    }

    /// Waits until the token fires.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancelled(&self) {
        match &self.parts {
            Parts::Node { token, .. } => token.cancelled().await,
            Parts::Space(space) => space.cancelled().await,
        }
    }

    /// Whether the token fired: some lock may have been lost.
    pub fn is_lost(&self) -> bool {
        match &self.parts {
            Parts::Node { leases, token, .. } => {
                token.is_cancelled() || leases.iter().any(Lease::is_lost)
            }
            Parts::Space(space) => space.is_lost(),
        }
    }

    /// Each lock's name and fencing token, in the canonical order they were taken in.
    pub fn fencing_tokens(&self) -> Vec<(&str, FencingToken)> {
        match &self.parts {
            Parts::Node { leases, .. } => leases
                .iter()
                .map(|l| (l.name(), l.fencing_token()))
                .collect(),
            Parts::Space(space) => space
                .fencing_tokens()
                .iter()
                .map(|(name, token)| (name.as_str(), *token))
                .collect(),
        }
    }

    /// The locks' names, in the canonical order they were taken in.
    pub fn names(&self) -> Vec<&str> {
        self.fencing_tokens().into_iter().map(|(n, _)| n).collect()
    }

    /// The leases of a multi-lock on one node, in the canonical order; empty in a
    /// [`LockSpace`](crate::LockSpace), whose parts are [`MultiLockGuard::space_lease`].
    /// A part's token fires when that part is lost, and also when another is or when the
    /// guard ends: on one node the parts share the guard's token.
    pub fn leases(&self) -> &[Lease] {
        match &self.parts {
            Parts::Node { leases, .. } => leases,
            Parts::Space(_) => &[],
        }
    }

    /// The parts of a multi-lock in a [`LockSpace`](crate::LockSpace) (its nodes, its
    /// epoch); `None` on one node, whose parts are [`MultiLockGuard::leases`].
    pub fn space_lease(&self) -> Option<&SpaceLease> {
        match &self.parts {
            Parts::Node { .. } => None,
            Parts::Space(space) => Some(space),
        }
    }

    /// Releases every lock and waits for the servers' answers: `true` if all were still
    /// held, `false` if any was already lost.
    ///
    /// # Errors
    ///
    /// A session ended first (its server then releases what it held).
    ///
    /// # Cancel safety
    ///
    /// The token fires and every release is requested at once (as by a drop); dropping the
    /// future only skips the wait.
    pub async fn unlock(self) -> Result<bool> {
        match self.parts {
            Parts::Node { leases, token, .. } => {
                token.cancel();
                release_all(leases).await
            }
            Parts::Space(space) => space.release().await,
        }
    }

    /// The same as [`MultiLockGuard::unlock`]: releases every lock.
    ///
    /// # Errors
    ///
    /// A session ended first (its server then releases what it held).
    ///
    /// # Cancel safety
    ///
    /// As [`MultiLockGuard::unlock`].
    pub async fn release(self) -> Result<bool> {
        self.unlock().await
    }

    /// The fencing token of the first name (in the canonical order); each name's own is
    /// in [`MultiLockGuard::fencing_tokens`].
    pub fn fencing_token(&self) -> FencingToken {
        match &self.parts {
            Parts::Node { leases, .. } => {
                leases.first().map(Lease::fencing_token).unwrap_or_default()
            }
            Parts::Space(space) => space.fencing_token(),
        }
    }
}

impl Guard for MultiLockGuard {
    fn fencing_token(&self) -> FencingToken {
        MultiLockGuard::fencing_token(self)
    }

    fn token(&self) -> CancellationToken {
        MultiLockGuard::token(self)
    }

    fn is_lost(&self) -> bool {
        MultiLockGuard::is_lost(self)
    }

    fn release(self) -> impl std::future::Future<Output = Result<bool>> + Send {
        self.unlock()
    }
}

/// How long a multi-lock that gives up waits, in all, for the server to confirm the
/// releases of the locks it took; past it the releases stay queued on the session.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Releases every lease at once and waits for the answers: `true` if all were still held.
/// Every release is requested on the first poll.
async fn release_all(leases: Vec<Lease>) -> Result<bool> {
    let releases: Vec<_> = leases.into_iter().map(Lease::release).collect();
    let mut all = true;
    for released in futures::future::join_all(releases).await {
        all &= released?;
    }
    Ok(all)
}

impl MultiLock {
    pub(crate) fn new<S: AsRef<str>>(
        scope: impl Into<Scope>,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            scope: scope.into(),
            names: canonical(names),
            data: Vec::new(),
        }
    }

    /// Data stored with the holder of each lock (visible in describes), e.g. the host name.
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// The names, in the canonical order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn check(&self) -> Result<()> {
        if self.names.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a multi-lock needs at least one lock name",
            ));
        }
        self.names.iter().try_for_each(|n| config::check_name(n))?;
        config::check_data(&self.data)
    }

    /// Waits for every lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for no names, an oversized name or data; session
    /// errors (on a [`SessionManager`] it starts over in the next session instead).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request in progress and releases the locks
    /// already taken.
    pub fn lock(&self) -> Acquiring<MultiLockGuard> {
        self.start(None).expect_some()
    }

    /// Takes every lock only if each is free now and nobody is queued for it; `None`
    /// otherwise (and nothing is held).
    ///
    /// # Errors
    ///
    /// As [`MultiLock::lock_timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`MultiLock::lock`].
    pub fn try_lock(&self) -> Acquiring<Option<MultiLockGuard>> {
        self.lock_timeout(Duration::ZERO)
    }

    /// Waits for every lock until `timeout` from the first poll, one deadline for all of
    /// them; `None` if a lock was not granted in time (the locks taken by then are
    /// released, and the call waits for the server to confirm, within its bound). At most
    /// a day, as every acquire timeout
    /// ([`MAX_ACQUIRE_TIMEOUT`](crate::config::MAX_ACQUIRE_TIMEOUT)); for longer, use
    /// [`MultiLock::lock`].
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
    /// let a = client.session("/local/app", SessionOptions::new()).await?;
    /// let b = client.session("/local/app", SessionOptions::new()).await?;
    /// let held = b.mutex("y").lock().await?;
    /// let both = a.multi_lock(["x", "y"]).lock_timeout(Duration::from_millis(100)).await?;
    /// assert!(both.is_none());
    /// // "x" was taken, then given back at the deadline.
    /// assert!(b.mutex("x").try_lock().await?.is_some());
    /// # drop(held);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a timeout over a day; at the bound,
    /// [`ErrorKind::Unavailable`] when the node did not answer (see
    /// [`Acquiring`]'s bounds); otherwise as [`MultiLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`MultiLock::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Acquiring<Option<MultiLockGuard>> {
        self.start(Some(timeout))
    }

    /// The acquire of every lock, waiting at most `timeout` (without one, always `Some`).
    fn start(&self, timeout: Option<Duration>) -> Acquiring<Option<MultiLockGuard>> {
        let checked = match timeout {
            Some(timeout) => config::check_acquire_timeout(timeout),
            None => Ok(()),
        };
        if let Err(e) = checked.and_then(|()| self.check()) {
            return Acquiring::failed(e);
        }
        let source = match &self.scope {
            Scope::Node(source) => source.clone(),
            Scope::Space(space) => {
                let spec = crate::space::Spec::mutex(&self.data, None);
                return in_space(space, self.names.clone(), spec, timeout, false, |parts| {
                    MultiLockGuard {
                        parts: Parts::Space(parts),
                    }
                });
            }
        };
        let this = self.clone();
        let acquiring = Acquiring::steps(move |queued, trips| {
            Box::pin(async move {
                let deadline = timeout.map(|t| crate::clock::later(Instant::now(), t));
                this.take(&source, deadline, &queued, &trips).await
            })
        });
        match timeout {
            Some(timeout) => acquiring.within(timeout),
            None => acquiring,
        }
    }

    /// Takes every lock by `deadline` (`None`: no deadline), in one session, starting over
    /// in the next session after a loss when the source renews.
    async fn take(
        &self,
        source: &Source,
        deadline: Option<Instant>,
        queued: &watch::Sender<bool>,
        trips: &RoundTrips,
    ) -> Result<Option<MultiLockGuard>> {
        loop {
            let session = source.session().await?;
            trips.note(session.round_trip());
            match self.take_in(&session, deadline, queued, trips).await {
                Err(e) => match source.after_error(e) {
                    Next::Retry => continue,
                    Next::End(e) => return Err(e),
                },
                ok => return ok,
            }
        }
    }

    /// One attempt in `session`: each lock in order; `None` when the deadline passes. On
    /// the way out without the guard, the leases taken so far are released and the answers
    /// awaited (bounded), so the call does not return with a part still held.
    async fn take_in(
        &self,
        session: &Session,
        deadline: Option<Instant>,
        queued: &watch::Sender<bool>,
        trips: &RoundTrips,
    ) -> Result<Option<MultiLockGuard>> {
        let mut leases = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let mut options = AcquireOptions::exclusive()
                .ephemeral(true)
                .data(self.data.clone());
            if let Some(deadline) = deadline {
                options = options.timeout(deadline.saturating_duration_since(Instant::now()));
            }
            let mut acquire = session.acquire(name, options);
            if acquire.queued().await {
                queued.send_replace(true);
            }
            let taken = acquire.await;
            trips.note(session.round_trip());
            match taken {
                Ok(lease) => leases.push(lease),
                Err(e) => {
                    // Dropped, the leases would only queue their releases.
                    if tokio::time::timeout(RELEASE_WAIT, release_all(leases))
                        .await
                        .is_err()
                    {
                        tracing::debug!(
                            locks = ?self.names,
                            "the releases of a multi-lock's parts were not confirmed in time"
                        );
                    }
                    return if e.kind() == ErrorKind::NotAcquired {
                        Ok(None)
                    } else {
                        Err(e)
                    };
                }
            }
        }
        Ok(Some(MultiLockGuard::new(leases)))
    }
}

/// The names in the order every process takes them: sorted (by bytes), each once.
fn canonical<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut names: Vec<String> = names.into_iter().map(|n| n.as_ref().to_string()).collect();
    names.sort();
    names.dedup();
    names
}

impl Session {
    /// A [`MultiLock`] on the mutexes `names` (any order, repeats ignored).
    pub fn multi_lock<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) -> MultiLock {
        MultiLock::new(Source::new(self.clone()), names)
    }
}

impl SessionManager {
    /// A [`MultiLock`] on the mutexes `names` that starts over in the next session after a
    /// loss.
    pub fn multi_lock<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) -> MultiLock {
        MultiLock::new(Source::new(self.clone()), names)
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn overlapping_sets_in_any_order_are_taken_in_one_order() {
        assert_eq!(canonical(["b", "a"]), canonical(["a", "b"]));
        assert_eq!(canonical(["c", "a", "b", "a"]), ["a", "b", "c"]);
        // By bytes, so every process agrees whatever its locale.
        assert_eq!(canonical(["a", "B", "é", "Z"]), ["B", "Z", "a", "é"]);
        assert!(canonical(Vec::<String>::new()).is_empty());
    }
}
