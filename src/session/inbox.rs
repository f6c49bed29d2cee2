//! The session task's inbox: the commands of its handles and the notices of its leases,
//! acquires and watches, in two queues behind one lock.
//!
//! Two tokio channels cost an idle session about 1.6 KB (each allocates its shared state and
//! a first block of 32 slots up front). This inbox costs one small allocation; its queues
//! hold the messages themselves (no box each), take a buffer only while they hold messages
//! and free it once the session task has read them. Every [`Handle`] counts: when the last one is dropped the session task sees both
//! queues end, which is how it learns that nobody can use the session any more.
//!
//! The handles also share, through it, what every one of them needs: the session's id, its
//! terminal cause, its token and the counter of caller ids, so that a lease carries one pointer for
//! them all.
//!
//! Nothing bounds the queues: almost every sender then waits for its answer (which spends
//! its task's tokio budget), and the session task reads one message per turn, between the
//! stream's messages and the timer, spending its own budget for each.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio_util::sync::CancellationToken;

use super::core::{CallerId, Terminal};
use super::driver::{Notice, Request};
use crate::error::Error;

#[derive(Debug, Default)]
struct Mail {
    commands: VecDeque<Request>,
    notices: VecDeque<Notice>,
    /// The session task, waiting for mail.
    waker: Option<Waker>,
    /// Live handles.
    handles: usize,
    /// The session task is done: nothing more is accepted.
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    mail: Mutex<Mail>,
    session_id: u64,
    terminal: Arc<Terminal>,
    ids: AtomicU64,
    /// The session's token: the parent of every lease token.
    token: CancellationToken,
}

/// The session task is done: it takes no more messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed;

/// A sender of commands and notices; every clone keeps the session open.
#[derive(Debug)]
pub(crate) struct Handle(Arc<Shared>);

/// The session task's end.
#[derive(Debug)]
pub(crate) struct Inbox(Arc<Shared>);

/// A new inbox of session `session_id`, whose cause is told by `terminal`, and its first
/// handle.
pub(crate) fn inbox(
    session_id: u64,
    terminal: Arc<Terminal>,
    token: CancellationToken,
) -> (Handle, Inbox) {
    let shared = Arc::new(Shared {
        mail: Mutex::new(Mail {
            handles: 1,
            ..Mail::default()
        }),
        session_id,
        terminal,
        ids: AtomicU64::new(1),
        token,
    });
    (Handle(shared.clone()), Inbox(shared))
}

fn lock(shared: &Shared) -> MutexGuard<'_, Mail> {
    // Nothing panics while holding the lock; a poisoned inbox is still consistent.
    shared.mail.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes `waker` (taken out of the lock, so the woken task does not wait for it).
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl Handle {
    /// The server's id of the session.
    pub(crate) fn session_id(&self) -> u64 {
        self.0.session_id
    }

    /// A caller id, unique in the session.
    pub(crate) fn next_id(&self) -> CallerId {
        self.0.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// The session's token, cancelled when the session is lost or closed.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.0.token
    }

    /// Why the session ended, once it has.
    pub(crate) fn terminal(&self) -> &Terminal {
        &self.0.terminal
    }

    /// The error for a session that can no longer take requests.
    pub(crate) fn gone(&self) -> Error {
        self.0.terminal.cause()
    }

    /// Queues a command; drops it if the session task is done.
    pub(crate) fn command(&self, request: Request) -> Result<(), Closed> {
        self.push(request, |mail| &mut mail.commands)
    }

    /// Queues a notice; drops it if the session task is done.
    pub(crate) fn notice(&self, notice: Notice) -> Result<(), Closed> {
        self.push(notice, |mail| &mut mail.notices)
    }

    fn push<T>(&self, item: T, queue: fn(&mut Mail) -> &mut VecDeque<T>) -> Result<(), Closed> {
        let mut mail = lock(&self.0);
        if mail.closed {
            drop(mail);
            drop(item);
            return Err(Closed);
        }
        queue(&mut mail).push_back(item);
        let waker = mail.waker.take();
        drop(mail);
        wake(waker);
        Ok(())
    }
}

impl Clone for Handle {
    fn clone(&self) -> Self {
        lock(&self.0).handles += 1;
        Self(self.0.clone())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut mail = lock(&self.0);
        mail.handles -= 1;
        let waker = if mail.handles == 0 {
            mail.waker.take()
        } else {
            None
        };
        drop(mail);
        wake(waker);
    }
}

/// Takes the first message of `queue`, freeing its buffer once it is empty: an idle session
/// holds none, and a burst of messages costs one allocation.
fn pop<T>(queue: &mut VecDeque<T>) -> Option<T> {
    let first = queue.pop_front();
    if queue.is_empty() && queue.capacity() > 0 {
        *queue = VecDeque::new();
    }
    first
}

impl Inbox {
    /// The next notice; `None` once every handle is gone and the queue is read.
    pub(crate) fn poll_notice(&self, cx: &mut Context<'_>) -> Poll<Option<Notice>> {
        self.poll_queue(cx, |mail| &mut mail.notices)
    }

    /// The next command; `None` once every handle is gone and the queue is read.
    pub(crate) fn poll_command(&self, cx: &mut Context<'_>) -> Poll<Option<Request>> {
        self.poll_queue(cx, |mail| &mut mail.commands)
    }

    /// The next message of one queue. Every message taken counts against the task's tokio
    /// budget, as a channel's would: a session flooded with mail still yields to the other
    /// tasks of its worker.
    fn poll_queue<T>(
        &self,
        cx: &mut Context<'_>,
        queue: fn(&mut Mail) -> &mut VecDeque<T>,
    ) -> Poll<Option<T>> {
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let mut mail = lock(&self.0);
        if let Some(item) = pop(queue(&mut mail)) {
            coop.made_progress();
            return Poll::Ready(Some(item));
        }
        if mail.handles == 0 || mail.closed {
            return Poll::Ready(None);
        }
        // One slot for both queues: the session task is their only reader.
        let replaced = match &mail.waker {
            Some(w) if w.will_wake(cx.waker()) => None,
            _ => mail.waker.replace(cx.waker().clone()),
        };
        drop(mail);
        drop(replaced);
        Poll::Pending
    }

    /// The next notice.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a notice is taken only when this returns it.
    pub(crate) async fn notice(&self) -> Option<Notice> {
        std::future::poll_fn(|cx| self.poll_notice(cx)).await
    }

    /// The next command.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a command is taken only when this returns it.
    pub(crate) async fn command(&self) -> Option<Request> {
        std::future::poll_fn(|cx| self.poll_command(cx)).await
    }

    /// Refuses everything from now on and returns what is still queued, commands first
    /// and notices second, for the session task to answer with the cause.
    pub(crate) fn close(&self) -> (VecDeque<Request>, VecDeque<Notice>) {
        let mut mail = lock(&self.0);
        mail.closed = true;
        mail.waker = None;
        (
            std::mem::take(&mut mail.commands),
            std::mem::take(&mut mail.notices),
        )
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // A session task that ends without closing (a panic) still refuses new mail.
        drop(self.close());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::task::noop_waker_ref;

    use super::*;
    use crate::session::core::Control;
    use crate::session::driver::ReplyTx;

    fn notice(caller: u64) -> Notice {
        Notice {
            control: Control::Snapshot { caller },
            reply: ReplyTx::None,
        }
    }

    fn caller(n: &Notice) -> Option<u64> {
        match n.control {
            Control::Snapshot { caller } => Some(caller),
            _ => None,
        }
    }

    fn cx() -> Context<'static> {
        Context::from_waker(noop_waker_ref())
    }

    struct Counter(AtomicUsize);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn notices_come_out_in_order_and_the_buffer_is_freed_when_read() {
        let (handle, inbox) = inbox(7, Arc::default(), CancellationToken::new());
        for caller in 1..=3 {
            assert!(handle.notice(notice(caller)).is_ok());
        }
        let mut read = Vec::new();
        while let Poll::Ready(Some(n)) = inbox.poll_notice(&mut cx()) {
            read.push(caller(&n));
        }
        assert_eq!(read, [Some(1), Some(2), Some(3)]);
        assert_eq!(lock(&inbox.0).notices.capacity(), 0);
        assert!(inbox.poll_command(&mut cx()).is_pending());
    }

    #[test]
    fn the_queues_end_when_the_last_handle_is_dropped_and_the_waiting_task_is_woken() {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let (handle, inbox) = inbox(7, Arc::default(), CancellationToken::new());
        let second = handle.clone();
        assert!(inbox.poll_notice(&mut cx).is_pending());
        drop(handle);
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        assert!(inbox.poll_command(&mut cx).is_pending());
        assert!(second.notice(notice(9)).is_ok());
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        drop(second);
        // Mail sent before the last handle went is still read, then the queue ends.
        assert!(
            matches!(inbox.poll_notice(&mut cx), Poll::Ready(Some(n)) if caller(&n) == Some(9))
        );
        assert!(matches!(inbox.poll_notice(&mut cx), Poll::Ready(None)));
        assert!(matches!(inbox.poll_command(&mut cx), Poll::Ready(None)));
    }

    #[test]
    fn a_closed_inbox_hands_back_what_was_queued_and_refuses_more() {
        let (handle, inbox) = inbox(7, Arc::default(), CancellationToken::new());
        assert!(handle.notice(notice(1)).is_ok());
        let (commands, notices) = inbox.close();
        assert!(commands.is_empty());
        assert_eq!(notices.len(), 1);
        assert!(handle.notice(notice(2)).is_err());
        assert!(matches!(inbox.poll_notice(&mut cx()), Poll::Ready(None)));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_flooded_session_task_still_yields_to_the_other_tasks() {
        let (handle, inbox) = inbox(7, Arc::default(), CancellationToken::new());
        for caller in 0..1000 {
            assert!(handle.notice(notice(caller)).is_ok());
        }
        // The queue ends after the last notice, so the loop below cannot wait for ever.
        drop(handle);
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other_ran.clone();
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        // Every notice is ready at once; only the task budget makes the reader yield.
        let mut read_before_the_other_task_ran = 0;
        while let Some(_n) = inbox.notice().await {
            if other_ran.load(Ordering::SeqCst) {
                break;
            }
            read_before_the_other_task_ran += 1;
        }
        assert!(other_ran.load(Ordering::SeqCst));
        assert!(read_before_the_other_task_ran < 1000);
    }
}
