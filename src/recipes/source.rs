//! Where a recipe gets its session from: a [`Session`] or a [`SessionManager`], behind one
//! small trait, so a recipe is written once and never asks which of the two it has.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::{Error, Result};
use crate::keeper::{Keeper, Kept};
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

    /// The error of a source that gives no session any more (a stopped manager's: its
    /// `SessionClosed` after a shutdown, or the fatal error that stopped it); `None` while
    /// it may give one.
    fn stopped(&self) -> Option<Error>;

    /// The session timeout: how long a read without a bound of its own waits for the node
    /// (past it, silence means the session may be lost anyway).
    fn timeout(&self) -> std::time::Duration;

    /// The task that keeps the waits of the recipes taken through this source: bounded
    /// holds to their deadlines, group memberships through their sessions.
    fn waits(&self) -> &Keeper<Kept>;
}

impl SessionSource for Session {
    fn session(&self) -> BoxFuture<'_, Result<Session>> {
        Box::pin(std::future::ready(Ok(self.clone())))
    }

    fn renews(&self) -> bool {
        false
    }

    fn stopped(&self) -> Option<Error> {
        None
    }

    fn timeout(&self) -> std::time::Duration {
        Session::timeout(self)
    }

    fn waits(&self) -> &Keeper<Kept> {
        Session::waits(self)
    }
}

impl SessionSource for SessionManager {
    fn session(&self) -> BoxFuture<'_, Result<Session>> {
        Box::pin(self.current())
    }

    fn renews(&self) -> bool {
        !self.is_stopped()
    }

    fn stopped(&self) -> Option<Error> {
        self.is_stopped().then(|| self.stopped_error())
    }

    fn timeout(&self) -> std::time::Duration {
        SessionManager::timeout(self)
    }

    fn waits(&self) -> &Keeper<Kept> {
        SessionManager::waits(self)
    }
}

/// What a recipe does after an error: see [`Source::after_error`].
#[derive(Debug)]
pub(crate) enum Next {
    /// The session was lost and the source gives another: start the work over there.
    Retry,
    /// End with this error.
    End(Error),
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

    /// See [`SessionSource::waits`].
    pub(crate) fn waits(&self) -> &Keeper<Kept> {
        self.0.waits()
    }

    /// See [`SessionSource::timeout`].
    pub(crate) fn timeout(&self) -> std::time::Duration {
        self.0.timeout()
    }

    /// See [`SessionSource::renews`].
    pub(crate) fn renews(&self) -> bool {
        self.0.renews()
    }

    /// What to do after `e`, the one rule of every recipe's retry loop: a session lost on a
    /// source that renews is worth starting over in the next session; any other error ends
    /// the work, and a session lost on a manager that has stopped ends it with the
    /// manager's own error, the one [`Source::session`] would now give.
    pub(crate) fn after_error(&self, e: Error) -> Next {
        if !e.is_session_lost() {
            return Next::End(e);
        }
        if self.renews() {
            return Next::Retry;
        }
        Next::End(self.0.stopped().unwrap_or(e))
    }
}
