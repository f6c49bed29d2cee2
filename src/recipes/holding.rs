//! Where a recipe locks ([`Scope`]: one node, through a session or a manager, or a lock
//! space) and what its guard holds there ([`Holding`]: a lease, or a lock's parts in the
//! space), so that each recipe and each guard is written once for the three.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Source, lock_delay};
use crate::error::Result;
use crate::keeper::{Keeper, Kept};
use crate::session::{FencingToken, Lease};
use crate::space::{LockSpace, SpaceLease};

/// Where a recipe takes its locks.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// One coordination node, through a [`Session`](crate::Session) or a
    /// [`SessionManager`](crate::SessionManager).
    Node(Source),
    /// Every place the layout of a [`LockSpace`] gives a name.
    Space(LockSpace),
}

impl From<Source> for Scope {
    fn from(source: Source) -> Self {
        Self::Node(source)
    }
}

impl Scope {
    /// The task that keeps the waits of the recipes taken here (bounded holds, memberships).
    pub(crate) fn waits(&self) -> &Keeper<Kept> {
        match self {
            Self::Node(source) => source.waits(),
            Self::Space(space) => &space.shared().waits,
        }
    }
}

/// What a recipe's guard holds.
#[derive(Debug)]
pub(crate) enum Holding {
    /// A lease on one node; `clean`: its release first records a clean one (a lock-delay
    /// mutex, unbounded).
    Node { lease: Lease, clean: bool },
    /// A lock's parts in a lock space (which knows itself whether its release is clean).
    Space(SpaceLease),
}

impl Holding {
    pub(crate) fn fencing_token(&self) -> FencingToken {
        match self {
            Self::Node { lease, .. } => lease.fencing_token(),
            Self::Space(space) => space.fencing_token(),
        }
    }

    pub(crate) fn token(&self) -> CancellationToken {
        match self {
            Self::Node { lease, .. } => lease.token(),
            Self::Space(space) => space.token(),
        }
    }

    pub(crate) async fn cancelled(&self) {
        match self {
            Self::Node { lease, .. } => lease.cancelled().await,
            Self::Space(space) => space.cancelled().await,
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Self::Node { lease, .. } => lease.is_lost(),
            Self::Space(space) => space.is_lost(),
        }
    }

    pub(crate) async fn set_data(&self, data: &[u8]) -> Result<()> {
        match self {
            Self::Node { lease, .. } => lease.set_data(data).await,
            Self::Space(space) => space.set_data(data).await,
        }
    }

    /// When the hold was granted (in a space: its first part).
    pub(crate) fn granted_at(&self) -> Instant {
        match self {
            Self::Node { lease, .. } => lease.granted_at(),
            Self::Space(space) => space.granted_at(),
        }
    }

    pub(crate) fn lease(&self) -> Option<&Lease> {
        match self {
            Self::Node { lease, .. } => Some(lease),
            Self::Space(_) => None,
        }
    }

    pub(crate) fn space_lease(&self) -> Option<&SpaceLease> {
        match self {
            Self::Node { .. } => None,
            Self::Space(space) => Some(space),
        }
    }

    /// The lease of a hold on one node; the hold itself otherwise.
    pub(crate) fn into_lease(self) -> std::result::Result<Lease, Self> {
        match self {
            Self::Node { lease, .. } => Ok(lease),
            space @ Self::Space(_) => Err(space),
        }
    }

    /// Releases the hold (cleanly where it records that) and waits for the answers.
    pub(crate) async fn release(self) -> Result<bool> {
        match self {
            Self::Node { lease, clean: true } => lock_delay::release_clean(lease).await,
            Self::Node {
                lease,
                clean: false,
            } => lease.release().await,
            Self::Space(space) => space.release().await,
        }
    }
}
