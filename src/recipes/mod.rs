//! Locks built from session operations, with tokio's and etcd's verbs: [`Mutex`],
//! [`Semaphore`], [`RwLock`] and [`Election`]; and what fleets build on them: group
//! membership ([`Group`]), several locks at once ([`MultiLock`]) and a published value
//! ([`Published`]).
//!
//! Each recipe can be made from a [`Session`] (it ends with the session) or from a
//! [`SessionManager`] (a lock attempt interrupted by a session loss carries on in the
//! replacement session, and [`Mutex::hold`] re-acquires a lost lock); the locks
//! ([`Mutex`], [`Semaphore`], [`RwLock`], [`MultiLock`]) also from a
//! [`LockSpace`](crate::LockSpace), where each name is taken in every place its layout
//! gives it. It is the same type, with the same verbs and guards, wherever it locks: each is
//! written once against where it locks and never asks which of the three it has. None of
//! them contains protocol code: they only call [`Session`] operations (a lock space's
//! through its managers).
//!
//! Every acquire has a plain form, a `try_` form and a `_timeout(d)` form, and returns an
//! [`Acquiring`] future with [`Acquiring::queued`].
//!
//! One rule for names, whichever recipe and verb: a name over
//! [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes is refused with
//! [`ErrorKind::InvalidArgument`] before anything is sent (a stream yields that error, then
//! ends).
//!
//! Every guard has the same inherent verbs (`fencing_token()`, `token()`, `cancelled()`,
//! `is_lost()`, `release()`) and is a [`Guard`], so code written against one recipe runs on
//! one node, on a manager and in a lock space alike. A distributed guard can be lost while
//! you hold it; that is the difference from `tokio::sync::MutexGuard`. What a guard holds
//! is its [`lease`](MutexGuard::lease) on one node or its
//! [`space_lease`](MutexGuard::space_lease) in a lock space; the bounded forms
//! ([`Mutex::lock_for`], [`Semaphore::acquire_for`], [`RwLock::read_for`],
//! [`RwLock::write_for`]) return a [`Bounded`] guard, whose guard lives in a wait that
//! ends it at its deadline, in one task of the session, manager or lock space beside every
//! other bounded hold taken there.
//!
//! # Examples
//!
//! One function, with nothing but the recipe's own methods, on a session, a manager and a
//! lock space:
//!
//! ```
//! # use ydb_coordination::emulator::Emulator;
//! use ydb_coordination::space::{Layout, LockSpace};
//! use ydb_coordination::{Client, FencingToken, Mutex, Result, SessionOptions};
//!
//! /// Charges the card under the lock; `None` if the lock was lost first.
//! async fn charge(card: &Mutex) -> Result<Option<FencingToken>> {
//!     let guard = card.lock().await?;
//!     let token = guard.fencing_token();
//!     let work = async { /* write to the store, sending `token` along */ };
//!     let done = guard.token().run_until_cancelled(work).await;
//!     guard.unlock().await?;
//!     Ok(done.map(|()| token))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
//! # let emulator = Emulator::builder().node("/local/app").node("/local/n1").start().await?;
//! # let client = Client::connect(&emulator.connection_string()).await?;
//! let session = client.session("/local/app", SessionOptions::new()).await?;
//! let manager = client.session_manager("/local/app", SessionOptions::new());
//! let space = LockSpace::builder()
//!     .node("n1", &client, "/local/n1")
//!     .layout(Layout::new(1, ["n1"])?)
//!     .open()
//!     .await?;
//! charge(&session.mutex("card-42")).await?;
//! charge(&manager.mutex("card-42")).await?;
//! let token = charge(&space.mutex("card-42")).await?;
//! assert_eq!(token.map(|t| t.epoch), Some(1));
//! # Ok(())
//! # }
//! ```

mod acquiring;
mod bounded;
mod election;
mod follow;
mod group;
mod guard;
mod held;
mod holding;
pub(crate) mod lock_delay;
mod multi_lock;
mod mutex;
mod published;
mod rwlock;
mod semaphore;
mod source;

pub use self::bounded::Bounded;
pub use self::election::{Candidate, Election, Leader, LeaderStream, Leadership};
pub(crate) use self::election::{candidates_on, leader_on};
pub use self::follow::Following;
pub use self::group::{Group, Member, MemberStream, Membership, MembershipState};
pub(crate) use self::group::{StateTx, members_on};
pub use self::guard::Guard;
pub use self::held::Held;
pub use self::multi_lock::{MultiLock, MultiLockGuard};
pub use self::mutex::{Mutex, MutexGuard};
pub(crate) use self::mutex::{other_mode, semaphore as mutex_semaphore};
pub use self::published::{Published, ValueStream};
pub use self::rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use self::semaphore::{Semaphore, SemaphorePermit};
use crate::session::Acquiring;

use self::acquiring::AfterGrant;
pub(crate) use self::holding::{Holding, Scope};
pub(crate) use self::source::{Next, Source};
use crate::config;
use crate::error::{Error, ErrorKind, Result};
use crate::manager::SessionManager;
use crate::session::{SemaphoreDescription, Session};
use std::time::Duration;

/// A recipe's acquire of `name`, or, for a name over [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN)
/// bytes, one that fails with [`ErrorKind::InvalidArgument`] when awaited, sending nothing:
/// the name rule every recipe verb applies (the server checks names only on create and
/// update).
pub(crate) fn acquiring<T: Send + 'static>(
    source: &Source,
    name: &str,
    options: crate::config::AcquireOptions,
    prepare: Prepare,
    finish: impl Fn(Result<crate::session::Lease>) -> Result<T> + Send + Sync + 'static,
) -> Acquiring<T> {
    acquiring_then(source, name, options, prepare, None, finish)
}

/// As [`acquiring`], with a step between the grant and `finish` (see [`AfterGrant`]).
pub(crate) fn acquiring_then<T: Send + 'static>(
    source: &Source,
    name: &str,
    options: crate::config::AcquireOptions,
    prepare: Prepare,
    after: Option<AfterGrant>,
    finish: impl Fn(Result<crate::session::Lease>) -> Result<T> + Send + Sync + 'static,
) -> Acquiring<T> {
    match config::check_name(name) {
        Ok(()) => Acquiring::new(source, name, options, prepare, after, finish),
        Err(err) => Acquiring::failed(err),
    }
}

/// A lock recipe's acquire in a lock space: of `names` with `spec` in every place (waiting
/// at most `timeout`; `bounded`: the hold ends at a bound), its parts made into the
/// caller's guard by `wrap`. Always `Some` without a timeout.
pub(crate) fn in_space<T: Send + 'static>(
    space: &crate::LockSpace,
    names: Vec<String>,
    spec: crate::space::Spec,
    timeout: Option<Duration>,
    bounded: bool,
    wrap: impl FnOnce(crate::space::SpaceLease) -> T + Send + 'static,
) -> Acquiring<Option<T>> {
    match timeout {
        Some(t) => crate::space::start(space, names, spec, t, bounded, wrap),
        None => crate::space::start_plain(space, names, spec, bounded, wrap)
            .and_then(|held| Ok(Some(held))),
    }
}

/// A one-name lock recipe's acquire (a mutex's, a semaphore's, a reader-writer lock's) of
/// `name` as `spec` says, wherever `scope` locks: waiting at most `timeout` (`bounded`: a
/// lock-delay mutex's hold ends at a bound, which is no clean release; only that reads it),
/// its hold made into the caller's guard by `finish`. Always `Some` without a timeout.
pub(crate) fn take_lock<T: Send + 'static>(
    scope: &Scope,
    name: &str,
    spec: crate::space::Spec,
    timeout: Option<Duration>,
    bounded: bool,
    finish: impl Fn(Holding) -> T + Send + Sync + 'static,
) -> Acquiring<Option<T>> {
    let source = match scope {
        Scope::Space(space) => {
            let names = vec![name.to_string()];
            let finish = move |parts| finish(Holding::Space(parts));
            return in_space(space, names, spec, timeout, bounded, finish);
        }
        Scope::Node(source) => source,
    };
    let mut options = spec.options;
    if let Some(t) = timeout {
        options = options.timeout(t);
    }
    let after = spec.lock_delay.map(lock_delay::after_grant);
    let delayed = after.is_some();
    let clean = delayed && !bounded;
    let (guard, mutex) = (spec.guard, spec.mutex);
    let named = name.to_string();
    acquiring_then(source, name, options, spec.prepare, after, move |r| {
        // A lease of a persistent semaphore must end when it is force-deleted under it.
        let r = if guard {
            r.inspect(crate::session::Lease::guard)
        } else {
            r
        };
        let r = if mutex {
            r.map_err(|e| other_mode(e, &named, delayed))
        } else {
            r
        };
        let lease = granted(r, timeout.is_some())?;
        Ok(lease.map(|lease| finish(Holding::Node { lease, clean })))
    })
}

/// A node's answer to a recipe's acquire: only a `timed` (bounded) wait answers "not
/// granted in time" (`None`); any other answer is the lease or an error.
pub(crate) fn granted(
    answer: Result<crate::session::Lease>,
    timed: bool,
) -> Result<Option<crate::session::Lease>> {
    if timed {
        crate::session::optional(answer)
    } else {
        answer.map(Some)
    }
}

/// What to make sure of in a session before acquiring.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Prepare {
    /// Nothing (ephemeral semaphores are created by the acquire).
    Nothing,
    /// A persistent semaphore with this limit exists.
    Semaphore { limit: u64 },
}

/// Creates a persistent semaphore with `limit` unless it exists; an existing one must have
/// the same limit.
pub(crate) async fn ensure_semaphore(session: &Session, name: &str, limit: u64) -> Result<()> {
    // A create whose outcome is unknown (its stream broke) may not have happened, and one
    // that found the semaphore may see it deleted before the describe: either way the
    // describe finds nothing, and the create is made again, each time after a round trip.
    const ATTEMPTS: usize = 3;
    let mut missing = None;
    for _ in 0..ATTEMPTS {
        match session.create_semaphore(name, limit, b"").await {
            Ok(()) => return Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::AlreadyExists | ErrorKind::OutcomeUnknown
                ) =>
            {
                match session
                    .describe_semaphore(name, crate::config::DescribeOptions::new())
                    .await
                {
                    Ok(d) => return check_persistent(name, &d, limit),
                    Err(e) if e.kind() == ErrorKind::NotFound => missing = Some(e),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(missing.unwrap_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!("semaphore {name:?} could not be created; it is deleted as it is made"),
        )
    }))
}

/// Refuses the semaphore `name` (described as `d`) unless it is persistent with `limit`: a
/// recipe does not share its name with another recipe's semaphore.
pub(crate) fn check_persistent(name: &str, d: &SemaphoreDescription, limit: u64) -> Result<()> {
    if d.limit != limit || d.ephemeral {
        return Err(Error::new(
            ErrorKind::PreconditionFailed,
            format!(
                "semaphore {name:?} exists with limit {}{}, not {limit}",
                d.limit,
                if d.ephemeral { " (ephemeral)" } else { "" }
            ),
        ));
    }
    Ok(())
}

/// The `Session` and `SessionManager` constructors `$fn(name)` of a recipe `$recipe`
/// (made with `$recipe::new(source, name)`).
macro_rules! made_from {
    ($fn:ident, $recipe:ident, $what:literal, $on_manager:literal) => {
        impl crate::session::Session {
            #[doc = concat!("The [`", stringify!($recipe), "`] ", $what, " `name`, in this session.")]
            pub fn $fn(&self, name: &str) -> $recipe {
                $recipe::new(Source::new(self.clone()), name)
            }
        }

        impl crate::manager::SessionManager {
            #[doc = concat!("The [`", stringify!($recipe), "`] ", $what, " `name`, ", $on_manager, ".")]
            pub fn $fn(&self, name: &str) -> $recipe {
                $recipe::new(Source::new(self.clone()), name)
            }
        }
    };
}
pub(crate) use made_from;

/// The inherent methods and the [`Guard`] impl of a recipe guard `$guard` whose field `held`
/// is a [`Holding`] (`$what`: what it holds, for the docs; `$verb`: the recipe's own word
/// for `release`, when it has one). They are inherent so that a user needs no trait import,
/// and written once here so that every guard, on a node or in a lock space, says the same.
macro_rules! lease_guard {
    ($guard:ident, $what:literal $(, $verb:ident)?) => {
        impl $guard {
            #[doc = concat!("The fencing token of the ", $what, ": send it with every write to the protected resource.")]
            ///
            /// On one node its epoch is 0; in a [`LockSpace`](crate::LockSpace) it carries
            /// the epoch of the layout whose place the holders of the name meet in (in a
            /// transition, the old or the new one's: see
            /// [`Layout`](crate::space::Layout)), so tokens of one name stay ordered across
            /// reshards.
            pub fn fencing_token(&self) -> crate::session::FencingToken {
                self.held.fencing_token()
            }

            #[doc = concat!("A token that fires when the ", $what, " is lost or ends (released, dropped).")]
            ///
            /// It is the holder's own: cancelling it stops only the holder's work and never
            /// changes the lock, which only `release()` or a drop lets go (see
            /// [`Guard::token`](crate::Guard::token)).
            pub fn token(&self) -> tokio_util::sync::CancellationToken {
                self.held.token()
            }

            #[doc = concat!("Waits until the ", $what, " is lost or ends.")]
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: dropping the future has no effect on the hold.
            pub async fn cancelled(&self) {
                self.held.cancelled().await;
            }

            #[doc = concat!("Whether the ", $what, " may have been lost (or ended).")]
            pub fn is_lost(&self) -> bool {
                self.held.is_lost()
            }

            /// Replaces the holder's data (what describes and watchers see), keeping the
            /// hold and its fencing token; in a lock space, in every place.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for data
            /// over [`MAX_DATA_LEN`](crate::config::MAX_DATA_LEN); the hold was lost or
            /// ended.
            ///
            /// # Cancel safety
            ///
            /// Dropping the future does not withdraw the updates already requested.
            pub async fn set_data(&self, data: &[u8]) -> crate::error::Result<()> {
                self.held.set_data(data).await
            }

            /// The lease of a hold on one node (a [`Session`](crate::Session)'s or a
            /// [`SessionManager`](crate::SessionManager)'s); `None` in a
            /// [`LockSpace`](crate::LockSpace), whose hold is [`Self::space_lease`].
            pub fn lease(&self) -> Option<&crate::session::Lease> {
                self.held.lease()
            }

            /// The parts of a hold in a [`LockSpace`](crate::LockSpace) (its nodes, its
            /// epoch, each name's fencing token); `None` on one node, whose hold is
            /// [`Self::lease`].
            pub fn space_lease(&self) -> Option<&crate::space::SpaceLease> {
                self.held.space_lease()
            }

            /// The lease of a hold on one node, to keep without the guard; a hold in a
            /// lock space comes back as it was (`Err`).
            ///
            /// # Errors
            ///
            /// The guard itself, for a hold in a [`LockSpace`](crate::LockSpace).
            pub fn into_lease(self) -> std::result::Result<crate::session::Lease, Self> {
                self.held.into_lease().map_err(|held| Self { held })
            }

            #[doc = concat!("Releases the ", $what, " and waits for the answer (`false`: it was already lost).")]
            ///
            /// # Errors
            ///
            /// The session ended first (the server then releases everything itself).
            ///
            /// # Cancel safety
            ///
            /// The release is requested at once; dropping the future only skips the wait.
            /// Of a mutex with a [lock delay](crate::Mutex::lock_delay), the record of a
            /// clean release is written first: dropping the future before that releases at
            /// once, not cleanly (the next holder waits the delay), as a drop does.
            pub async fn release(self) -> crate::error::Result<bool> {
                self.held.release().await
            }

            $(
            #[doc = concat!("The same as [`", stringify!($guard), "::release`]: releases the ", $what, ".")]
            ///
            /// # Errors
            ///
            /// The session ended first (the server then releases everything itself).
            ///
            /// # Cancel safety
            ///
            #[doc = concat!("As [`", stringify!($guard), "::release`].")]
            pub async fn $verb(self) -> crate::error::Result<bool> {
                self.held.release().await
            }
            )?
        }

        impl crate::recipes::Guard for $guard {
            fn fencing_token(&self) -> crate::session::FencingToken {
                self.held.fencing_token()
            }

            fn token(&self) -> tokio_util::sync::CancellationToken {
                self.held.token()
            }

            fn is_lost(&self) -> bool {
                self.held.is_lost()
            }

            fn release(self) -> impl std::future::Future<Output = crate::error::Result<bool>> + Send {
                self.held.release()
            }
        }
    };
}
pub(crate) use lease_guard;

impl Session {
    /// A [`Mutex`] on the ephemeral semaphore `name`.
    pub fn mutex(&self, name: &str) -> Mutex {
        Mutex::new(Source::new(self.clone()), name)
    }

    /// A counted [`Semaphore`] `name` with `limit` units (created if missing).
    pub fn semaphore(&self, name: &str, limit: u64) -> Semaphore {
        Semaphore::new(Source::new(self.clone()), name, limit)
    }

    /// A [`RwLock`] on the ephemeral semaphore `name`.
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock::new(Source::new(self.clone()), name)
    }

    /// An [`Election`] on the semaphore `name` (created with limit 1 if missing).
    pub fn election(&self, name: &str) -> Election {
        Election::new(Source::new(self.clone()), name)
    }
}

impl SessionManager {
    /// A [`Mutex`] that survives session loss.
    pub fn mutex(&self, name: &str) -> Mutex {
        Mutex::new(Source::new(self.clone()), name)
    }

    /// A counted [`Semaphore`] that survives session loss.
    pub fn semaphore(&self, name: &str, limit: u64) -> Semaphore {
        Semaphore::new(Source::new(self.clone()), name, limit)
    }

    /// A [`RwLock`] that survives session loss.
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock::new(Source::new(self.clone()), name)
    }

    /// An [`Election`] that survives session loss.
    pub fn election(&self, name: &str) -> Election {
        Election::new(Source::new(self.clone()), name)
    }
}

impl crate::LockSpace {
    /// A [`Mutex`] on `name` in this space: the same lock as
    /// [`SessionManager::mutex`] of that name on each node the layout places it on (two
    /// during a reshard's transition), taken in every place, with one guard over them.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let space = LockSpace::builder()
    ///     .node("n1", &client, "/local/n1")
    ///     .node("n2", &client, "/local/n2")
    ///     .layout(Layout::new(1, ["n1", "n2"])?)
    ///     .open()
    ///     .await?;
    /// let mutex = space.mutex("tenant-7/migrate");
    /// let guard = mutex.lock().await?;
    /// assert!(mutex.try_lock().await?.is_none());
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn mutex(&self, name: &str) -> Mutex {
        Mutex::new(Scope::Space(self.clone()), name)
    }

    /// A counted [`Semaphore`] `name` with `limit` units in this space (created on each
    /// node if missing); in a transition a permit is taken in both places, so the limit
    /// holds on both sides.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) {
    /// assert_eq!(space.semaphore("fragile-api", 5).limit(), 5);
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, limit: u64) -> Semaphore {
        Semaphore::new(Scope::Space(self.clone()), name, limit)
    }

    /// A [`RwLock`] on `name` in this space.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.rwlock("config");
    /// # }
    /// ```
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock::new(Scope::Space(self.clone()), name)
    }

    /// A [`MultiLock`] on the mutexes `names` of this space (any order, repeats ignored);
    /// the names may live on different nodes, and are taken in one global order whichever
    /// layout of a reshard a process runs.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) {
    /// assert_eq!(space.multi_lock(["b", "a", "b"]).names(), ["a", "b"]);
    /// # }
    /// ```
    pub fn multi_lock<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) -> MultiLock {
        MultiLock::new(Scope::Space(self.clone()), names)
    }

    /// An [`Election`] on `name` in this space: on each node the same election as
    /// [`SessionManager::election`]; a leader in a transition leads in both places, and
    /// writes its fencing token with its value in every place before it is handed its
    /// [`Leadership`], so [`Election::leader`] and [`Election::observe`] report the token
    /// the leader holds, across reshards. A value is at most
    /// [`MAX_DATA_LEN`](crate::config::MAX_DATA_LEN) less the token's frame (about 100
    /// bytes); a longer one is [`ErrorKind::InvalidArgument`].
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1").node("n2", &client, "/local/n2")
    /// #     .layout(Layout::new(1, ["n1", "n2"])?).open().await?;
    /// let election = space.election("scheduler");
    /// let leadership = election.campaign(b"host-a").await?;
    /// let leader = election.leader().await?.expect("we lead");
    /// assert!(leader.is_me && leader.data == b"host-a");
    /// assert_eq!(leader.fencing_token, leadership.fencing_token());
    /// leadership.set_data(b"host-a:9090").await?; // proclaim a new value
    /// leadership.resign().await?;
    /// assert!(election.leader().await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election::new(Scope::Space(self.clone()), name)
    }

    /// A [`Group`] `name` in this space: on each node the same group as
    /// [`SessionManager::group`]. A member follows the layout: in a transition it is a
    /// member in both places, and it leaves the old place once the space runs the new
    /// layout, so the members are always all in the place [`Group::members`] and
    /// [`Group::watch`] read. A wait in the space's task keeps each [`Membership`]; its
    /// state is that of its first place in the layout run (`Joined` with that place's
    /// session and order id), and it ends when it cannot follow a new layout (a node the
    /// space was not given) or a place's membership ends for good (its node's manager
    /// stopped, [`ErrorKind::SessionClosed`] after
    /// [`LockSpace::shutdown`](crate::LockSpace::shutdown), or the runtime of the space's
    /// task shut down).
    /// A move to a new layout in progress (which may wait for a node that is down) does not
    /// hold up a [`Membership::leave`]: the places it joined leave by themselves. While a
    /// move is under way, the state is that of the places before it.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1").node("n2", &client, "/local/n2")
    /// #     .layout(Layout::new(1, ["n1", "n2"])?).open().await?;
    /// let workers = space.group("workers");
    /// let me = workers.join(b"10.0.0.7:8080").await?;
    /// assert!(me.error().is_none());
    /// assert_eq!(workers.members().await?.len(), 1);
    /// me.leave().await?;
    /// assert!(workers.members().await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn group(&self, name: &str) -> Group {
        Group::new(Scope::Space(self.clone()), name)
    }
}
