//! The signals `ydb-coord` catches, for every command: while waiting they end the wait,
//! while a command runs they are forwarded to it.

use std::future::Future;

use nix::sys::signal::Signal;

use super::fail::Failure;

/// The signals `ydb-coord` catches: while waiting they end the wait, while the command
/// runs they are forwarded to it.
#[derive(Debug)]
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (SIGINT, SIGTERM, SIGHUP).
    pub(crate) fn install() -> Result<Self, Failure> {
        use tokio::signal::unix::{SignalKind, signal};
        let get = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::new(format!("cannot install signal handlers: {e}")))
        };
        Ok(Self {
            int: get(SignalKind::interrupt())?,
            term: get(SignalKind::terminate())?,
            hup: get(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    ///
    /// Cancel safe (tokio's `Signal::recv` is).
    pub(crate) async fn recv(&mut self) -> Signal {
        async fn next(s: &mut tokio::signal::unix::Signal, sig: Signal) -> Signal {
            match s.recv().await {
                Some(()) => sig,
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            s = next(&mut self.int, Signal::SIGINT) => s,
            s = next(&mut self.term, Signal::SIGTERM) => s,
            s = next(&mut self.hup, Signal::SIGHUP) => s,
        }
    }

    /// Runs `fut` unless a signal arrives first, which ends the program with 128 + signal.
    pub(crate) async fn interruptible<T>(
        &mut self,
        fut: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        tokio::select! {
            r = fut => r,
            sig = self.recv() => Err(interrupted(sig)),
        }
    }
}

/// The silent failure of being interrupted by `sig` (exit code 128 + signal number).
pub(crate) fn interrupted(sig: Signal) -> Failure {
    Failure::with_code(128u8.saturating_add(sig as u8), "")
}
