//! The vocabulary between the core and its driver: the commands and control messages the
//! handles send, the answers they get, and the effects the driver carries out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::held::Held;
use crate::config::{AcquireOptions, DescribeOptions, SessionOptions, WatchOptions};
use crate::error::{Error, Result};
use crate::proto::session_request as rq;
use crate::session::state::SessionState;
use crate::session::types::{SemaphoreDescription, SessionSnapshot, WatchUpdate};

/// Who asked: the driver maps it to the reply channel of the handle that sent a command.
pub(crate) type CallerId = u64;

/// A watch subscriber: the driver maps it to the subscriber's mailbox.
pub(crate) type SubscriberId = u64;

/// What a granted acquire hands to the caller.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The lease's record, shared with the core: its id, order id, since when, its token.
    pub(crate) held: Arc<Held>,
}

/// An acquire as sent by a handle.
#[derive(Debug)]
pub(crate) struct AcquireCmd {
    /// The caller, and the acquire's id for a cancel.
    pub(crate) caller: CallerId,
    /// Shared with the lease the acquire becomes and the core's tables.
    pub(crate) name: Arc<str>,
    pub(crate) opts: AcquireOptions,
    /// When the caller asked (for the wait-time metric).
    pub(crate) requested_at: Instant,
}

/// A request from a handle.
#[derive(Debug)]
pub(crate) enum Command {
    Acquire(AcquireCmd),
    Describe {
        caller: CallerId,
        name: String,
        opts: DescribeOptions,
    },
    Create {
        caller: CallerId,
        name: String,
        limit: u64,
        data: Vec<u8>,
    },
    Update {
        caller: CallerId,
        name: String,
        data: Vec<u8>,
    },
    Delete {
        caller: CallerId,
        name: String,
        force: bool,
    },
    Watch {
        subscriber: SubscriberId,
        name: String,
        opts: WatchOptions,
    },
    Close {
        caller: CallerId,
    },
}

/// A message that must never be lost: sent from `Drop` impls, and the calls of leases.
#[derive(Debug)]
pub(crate) enum Control {
    Release {
        name: Arc<str>,
        lease: u64,
        caller: Option<CallerId>,
    },
    CancelAcquire {
        name: Arc<str>,
        caller: CallerId,
    },
    SetData {
        name: Arc<str>,
        lease: u64,
        data: Vec<u8>,
        caller: CallerId,
    },
    Unwatch {
        name: String,
        subscriber: SubscriberId,
    },
    /// Watch the semaphore of a held lease, so that the lease ends as soon as the server
    /// reports the semaphore deleted (it tells no owner of a forced delete).
    GuardLease {
        name: Arc<str>,
        lease: u64,
    },
    Snapshot {
        caller: CallerId,
    },
}

/// The answer to one caller.
#[derive(Debug)]
pub(crate) enum Answer {
    Acquire(Result<Option<Grant>>),
    Describe(Result<SemaphoreDescription>),
    Done(Result<()>),
    Release(Result<bool>),
    Snapshot(SessionSnapshot),
    /// `close()` may return.
    Closed,
}

/// What the driver must do, in the order given.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Write a request on the current stream.
    Send(rq::Request),
    /// Answer a caller (each caller exactly once).
    Answer(CallerId, Answer),
    /// The server queued this caller's acquire.
    Queued(CallerId),
    /// Deliver a watch item (an error item is the subscriber's last).
    Watch(SubscriberId, Result<WatchUpdate>),
    /// Publish a new state.
    State(SessionState),
    /// Drop the current stream (it is dead, or the session ended) and forget its endpoint.
    DropStream,
    /// Open a stream and attach with this start message, giving up after `limit`.
    Dial {
        start: rq::SessionStart,
        limit: Duration,
    },
}

/// What fixes a session for its whole life.
#[derive(Debug, Clone)]
pub(crate) struct CoreConfig {
    pub(crate) path: String,
    pub(crate) options: SessionOptions,
    pub(crate) protection_key: Vec<u8>,
    pub(crate) session_id: u64,
    /// The sequence number of the attach that created the session.
    pub(crate) seq_no: u64,
}

/// The terminal cause, shared by every handle: set once, read by anyone.
#[derive(Debug, Default)]
pub(crate) struct Terminal(std::sync::Mutex<Option<Error>>);

impl Terminal {
    pub(crate) fn get(&self) -> Option<Error> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The terminal cause, or a plain "closed" while the session is shutting down.
    pub(crate) fn cause(&self) -> Error {
        self.get().unwrap_or_else(super::closed)
    }

    pub(crate) fn set(&self, err: Error) {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(err);
        }
    }
}
