//! Locks built from session operations, with tokio's and etcd's verbs: [`Mutex`],
//! [`Semaphore`], [`RwLock`] and [`Election`]; and what fleets build on them: group
//! membership ([`Group`]), several locks at once ([`MultiLock`]) and a published value
//! ([`Published`]).
//!
//! Each recipe can be made from a [`Session`] (it ends with the session) or from a
//! [`SessionManager`] (a lock attempt interrupted by a session loss carries on in the
//! replacement session, and [`Mutex::hold`] re-acquires a lost lock). Each is written once
//! against its session source and never asks which of the two it has. None of them contains
//! protocol code: they only call [`Session`] operations.
//!
//! Every acquire has a plain form, a `try_` form and a `_timeout(d)` form, and returns an
//! [`Acquiring`] future with [`Acquiring::queued`].
//!
//! One rule for names, whichever recipe and verb: a name over
//! [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes is refused with
//! [`ErrorKind::InvalidArgument`] before anything is sent (a stream yields that error, then
//! ends).
//!
//! Every guard is a [`Guard`]: its `fencing_token()`, `token()`, `is_lost()` and
//! `release()` mean the same on one node and in a [`LockSpace`](crate::LockSpace), so code
//! generic over it runs on either. A distributed guard can be lost while you hold it; that
//! is the difference from `tokio::sync::MutexGuard`. The guards of one node dereference to
//! their [`Lease`](crate::Lease); the bounded ones ([`Mutex::lock_for`],
//! [`Semaphore::acquire_for`], [`RwLock::read_for`], [`RwLock::write_for`]) are a
//! [`Bounded`] guard, whose guard lives in the task that ends it at its deadline.

mod acquiring;
mod bounded;
mod election;
mod follow;
mod group;
mod guard;
mod held;
pub(crate) mod lock_delay;
mod multi_lock;
mod mutex;
mod published;
mod rwlock;
mod semaphore;
mod source;

pub use self::bounded::Bounded;
pub use self::election::{Candidate, Election, Leader, LeaderStream, Leadership};
pub use self::follow::Following;
pub use self::group::{Group, Member, MemberStream, Membership, MembershipState};
pub use self::guard::Guard;
pub use self::held::Held;
pub use self::multi_lock::{MultiLock, MultiLockGuard};
pub(crate) use self::mutex::semaphore as mutex_semaphore;
pub use self::mutex::{Mutex, MutexGuard};
pub use self::published::{Published, ValueStream};
pub use self::rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use self::semaphore::{Semaphore, SemaphorePermit};
use crate::session::Acquiring;

use self::acquiring::AfterGrant;
pub(crate) use self::source::{Next, Source};
use crate::config;
use crate::error::{Error, ErrorKind, Result};
use crate::manager::SessionManager;
use crate::session::{SemaphoreDescription, Session};

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

/// Implements `Deref<Target = Lease>`, `release` (and the recipe's own verb for it, when it
/// has one), `into_lease` and [`Guard`] for a guard type. `release` is inherent so that it
/// never resolves through `Deref` to [`Lease::release`](crate::session::Lease::release),
/// which cannot move out of a borrow.
macro_rules! lease_guard {
    ($guard:ident, $what:literal $(, $verb:ident)?) => {
        impl std::ops::Deref for $guard {
            type Target = crate::session::Lease;

            fn deref(&self) -> &crate::session::Lease {
                &self.lease
            }
        }

        impl $guard {
            #[doc = concat!("Releases the ", $what, " and waits for the server's answer (`false`: it was already lost).")]
            ///
            /// # Errors
            ///
            /// The session ended first (the server then releases everything itself).
            ///
            /// # Cancel safety
            ///
            /// The release is requested at once; dropping the future only skips the wait.
            pub async fn release(self) -> crate::error::Result<bool> {
                self.lease.release().await
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
            /// The release is requested at once; dropping the future only skips the wait.
            pub async fn $verb(self) -> crate::error::Result<bool> {
                self.lease.release().await
            }
            )?

            /// The lease underneath.
            pub fn into_lease(self) -> crate::session::Lease {
                self.lease
            }
        }

        impl crate::recipes::Guard for $guard {
            fn fencing_token(&self) -> crate::session::FencingToken {
                self.lease.fencing_token()
            }

            fn token(&self) -> tokio_util::sync::CancellationToken {
                self.lease.token()
            }

            fn is_lost(&self) -> bool {
                self.lease.is_lost()
            }

            fn release(self) -> impl std::future::Future<Output = crate::error::Result<bool>> + Send {
                self.lease.release()
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
