//! Where answers go: what the handles send the session task, and the task's table of reply
//! senders, keyed by the caller the core names in its effects.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::core::{Answer, CallerId, Command, Control, Grant, Ids, SubscriberId};
use super::mailbox;
use super::types::{SemaphoreDescription, SessionSnapshot, WatchUpdate};
use crate::error::Result;

/// Where the answer to one command goes.
#[derive(Debug)]
pub(crate) enum ReplyTx {
    Acquire {
        reply: oneshot::Sender<Result<Option<Grant>>>,
        queued: Option<oneshot::Sender<()>>,
        name: Arc<str>,
    },
    Describe(oneshot::Sender<Result<SemaphoreDescription>>),
    Done(oneshot::Sender<Result<()>>),
    Release(oneshot::Sender<Result<bool>>),
    Snapshot(oneshot::Sender<SessionSnapshot>),
    Closed(oneshot::Sender<()>),
    Watch(mailbox::Sender),
    /// Nobody waits for an answer (a release from `Drop`).
    None,
}

/// A command and where its answer goes, sent through the session's inbox.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) command: Command,
    pub(crate) reply: ReplyTx,
}

/// A control message and where its answer goes (also sent from `Drop` impls).
#[derive(Debug)]
pub(crate) struct Notice {
    pub(crate) control: Control,
    pub(crate) reply: ReplyTx,
}

/// The reply senders of the callers waiting for an answer, and the watch subscribers.
#[derive(Debug, Default)]
pub(super) struct Replies {
    callers: HashMap<CallerId, ReplyTx, Ids>,
    subscribers: HashMap<SubscriberId, mailbox::Sender, Ids>,
}

impl Replies {
    /// How many callers wait for an answer.
    pub(super) fn waiting(&self) -> usize {
        self.callers.len()
    }

    /// Keeps where the answer to `request` goes and returns its command for the core;
    /// `None` for an acquire whose caller gave up before the request was read.
    pub(super) fn request(&mut self, request: Request) -> Option<Command> {
        if let (Command::Acquire(_), ReplyTx::Acquire { reply, .. }) =
            (&request.command, &request.reply)
            && reply.is_closed()
        {
            return None;
        }
        match (&request.command, request.reply) {
            (Command::Watch { subscriber, .. }, ReplyTx::Watch(tx)) => {
                self.subscribers.insert(*subscriber, tx);
            }
            (command, reply) => {
                if let Some(caller) = caller_of(command) {
                    self.callers.insert(caller, reply);
                }
            }
        }
        Some(request.command)
    }

    /// Keeps where the answer to `notice` goes and returns its control message for the core.
    pub(super) fn notice(&mut self, notice: Notice) -> Control {
        if let Some(caller) = control_caller(&notice.control)
            && !matches!(notice.reply, ReplyTx::None)
        {
            self.callers.insert(caller, notice.reply);
        }
        notice.control
    }

    /// Hands `answer` to `caller`. Returns a grant nobody takes any more (its semaphore and
    /// lease), for the core to give back.
    pub(super) fn answer(&mut self, caller: CallerId, answer: Answer) -> Option<(Arc<str>, u64)> {
        let reply = self.callers.remove(&caller)?;
        match (reply, answer) {
            (ReplyTx::Acquire { reply, name, .. }, Answer::Acquire(result)) => {
                if let Err(Ok(Some(grant))) = reply.send(result) {
                    return Some((name, grant.held.lease()));
                }
            }
            (ReplyTx::Describe(tx), Answer::Describe(result)) => {
                let _ = tx.send(result);
            }
            (ReplyTx::Done(tx), Answer::Done(result)) => {
                let _ = tx.send(result);
            }
            (ReplyTx::Release(tx), Answer::Release(result)) => {
                let _ = tx.send(result);
            }
            (ReplyTx::Snapshot(tx), Answer::Snapshot(snapshot)) => {
                let _ = tx.send(snapshot);
            }
            (ReplyTx::Closed(tx), Answer::Closed) => {
                let _ = tx.send(());
            }
            // A mismatch is a bug; dropping the sender makes the caller read the cause.
            (reply, answer) => {
                tracing::error!(?reply, ?answer, "answer of the wrong kind for a caller");
            }
        }
        None
    }

    /// Tells an acquire's caller that the server queued it.
    pub(super) fn queued(&mut self, caller: CallerId) {
        if let Some(ReplyTx::Acquire { queued, .. }) = self.callers.get_mut(&caller)
            && let Some(q) = queued.take()
        {
            let _ = q.send(());
        }
    }

    /// Hands a watch item to its subscriber; forgets the subscriber after the last item or
    /// once it is gone.
    pub(super) fn watch(&mut self, subscriber: SubscriberId, item: Result<WatchUpdate>) {
        let last = item.is_err();
        let open = self
            .subscribers
            .get(&subscriber)
            .is_some_and(|tx| tx.put(item));
        if last || !open {
            self.subscribers.remove(&subscriber);
        }
    }
}

/// The caller a command answers.
fn caller_of(command: &Command) -> Option<CallerId> {
    match command {
        Command::Acquire(a) => Some(a.caller),
        Command::Describe { caller, .. }
        | Command::Create { caller, .. }
        | Command::Update { caller, .. }
        | Command::Delete { caller, .. }
        | Command::Close { caller } => Some(*caller),
        Command::Watch { .. } => None,
    }
}

/// The caller a control message answers.
fn control_caller(control: &Control) -> Option<CallerId> {
    match control {
        Control::Release { caller, .. } => *caller,
        Control::SetData { caller, .. } | Control::Snapshot { caller } => Some(*caller),
        Control::CancelAcquire { .. } | Control::Unwatch { .. } | Control::GuardLease { .. } => {
            None
        }
    }
}
