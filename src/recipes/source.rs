//! Where a recipe gets its session from: a [`Session`] or a [`SessionManager`], behind one
//! small trait, so a recipe is written once and never asks which of the two it has.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::manager::SessionManager;
use crate::session::Session;

/// Something that gives a recipe a live session.
pub(crate) trait SessionSource: fmt::Debug + Send + Sync + 'static {
    /// The session to work in now (on a manager: waits while a replacement is made).
    fn session(&self) -> BoxFuture<'_, Result<Session>>;

    /// Whether a lost session is replaced, so that work interrupted by the loss is worth
    /// repeating with the next [`SessionSource::session`]. `false` once no session will
    /// come again (a stopped manager): every retry loop then ends with the error it has,
    /// rather than asking again for a session that fails at once.
    fn renews(&self) -> bool;
}

impl SessionSource for Session {
    fn session(&self) -> BoxFuture<'_, Result<Session>> {
        Box::pin(std::future::ready(Ok(self.clone())))
    }

    fn renews(&self) -> bool {
        false
    }
}

impl SessionSource for SessionManager {
    fn session(&self) -> BoxFuture<'_, Result<Session>> {
        Box::pin(self.current())
    }

    fn renews(&self) -> bool {
        !self.is_stopped()
    }
}

/// A shared [`SessionSource`], the one field through which every recipe reaches the server.
#[derive(Debug, Clone)]
pub(crate) struct Source(Arc<dyn SessionSource>);

impl Source {
    pub(crate) fn new(source: impl SessionSource) -> Self {
        Self(Arc::new(source))
    }

    /// See [`SessionSource::session`].
    pub(crate) async fn session(&self) -> Result<Session> {
        self.0.session().await
    }

    /// See [`SessionSource::renews`].
    pub(crate) fn renews(&self) -> bool {
        self.0.renews()
    }
}
