//! The guard that keeps a dead session task from leaving leases that look valid.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::core::Terminal;
use super::state::SessionState;
use crate::error::{Error, ErrorKind};

/// Whatever ends the session task, a panic included, no lease may look valid afterwards:
/// dropped while armed, this publishes a cause, fires every token and makes the state
/// terminal (in the spirit of tower's buffer worker). Disarmed once the core has ended the
/// session in order.
#[derive(Debug)]
pub(crate) struct Sentinel {
    pub(crate) token: CancellationToken,
    pub(crate) state: watch::Sender<SessionState>,
    pub(crate) terminal: Arc<Terminal>,
    pub(crate) armed: bool,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.terminal.set(Error::new(
            ErrorKind::Internal,
            "the session task stopped unexpectedly; its leases may be lost",
        ));
        self.token.cancel();
        let _ = self.state.send_replace(SessionState::Expired);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_panicking_session_task_fires_every_token_and_publishes_a_cause() {
        let token = CancellationToken::new();
        let lease = token.child_token();
        let (state, rx) = watch::channel(SessionState::Attached { session_id: 7 });
        let terminal = Arc::new(Terminal::default());
        let sentinel = Sentinel {
            token: token.clone(),
            state,
            terminal: terminal.clone(),
            armed: true,
        };
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = sentinel;
            panic!("a bug in the session task");
        }));
        assert!(unwound.is_err());
        assert!(lease.is_cancelled());
        assert_eq!(*rx.borrow(), SessionState::Expired);
        assert_eq!(terminal.get().map(|e| e.kind()), Some(ErrorKind::Internal));
    }

    #[test]
    fn a_disarmed_sentinel_changes_nothing() {
        let token = CancellationToken::new();
        let (state, rx) = watch::channel(SessionState::Attached { session_id: 7 });
        let terminal = Arc::new(Terminal::default());
        drop(Sentinel {
            token: token.clone(),
            state,
            terminal: terminal.clone(),
            armed: false,
        });
        assert!(!token.is_cancelled());
        assert_eq!(*rx.borrow(), SessionState::Attached { session_id: 7 });
        assert!(terminal.get().is_none());
    }
}
