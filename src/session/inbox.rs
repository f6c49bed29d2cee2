//! The session's inbox: the commands of its handles and the notices of its leases,
//! acquires and watches, in two queues behind one lock.
//!
//! A handle puts its message in a queue and wakes the session task, which takes every queued
//! message in one turn, so the core sees each queue in the order it was filled and a burst of
//! requests costs the task one turn.
//!
//! Two tokio channels cost an idle session about 1.6 KB (each allocates its shared state and
//! a first block of 32 slots up front). This inbox costs one small allocation; its queues
//! hold the messages themselves (no box each) and take a buffer only while they hold
//! messages. Every [`Handle`] counts: when the last one is dropped the session task sees
//! the inbox end, which is how it learns that nobody can use the session any more.
//!
//! The handles also share, through it, what every one of them needs: the session's id, its
//! terminal cause, its token and the counter of caller ids, so that a lease carries one pointer for
//! them all.
//!
//! Nothing bounds the queues: almost every sender then waits for its answer (which spends
//! its task's tokio budget), and the session task reads the queues once per turn, between
//! the stream's messages and the timer, spending its own budget for each turn.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio_util::sync::CancellationToken;

use super::core::{CallerId, Terminal};
use super::replies::{Notice, Request};
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
    /// The latest round trip the session task measured, in nanoseconds (what a bounded
    /// call waits past its deadline for an answer).
    round_trip: AtomicU64,
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

/// What the session task finds in its inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mailed {
    /// Messages to read.
    Mail,
    /// Every handle is gone and the queues are read.
    Ended,
}

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
        round_trip: AtomicU64::new(0),
    });
    (Handle(shared.clone()), Inbox(shared))
}

fn lock(shared: &Shared) -> MutexGuard<'_, Mail> {
    // Nothing panics while holding the lock; a poisoned inbox is still consistent.
    shared.mail.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queues `item` for the session task, unless it is done (or, for a `weak` sender, nobody
/// holds a handle any more).
fn push<T>(
    shared: &Shared,
    item: T,
    queue: fn(&mut Mail) -> &mut VecDeque<T>,
    weak: bool,
) -> Result<(), Closed> {
    let mut mail = lock(shared);
    if mail.closed || (weak && mail.handles == 0) {
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

    /// The latest round trip the session task measured.
    pub(crate) fn round_trip(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0.round_trip.load(Ordering::Relaxed))
    }

    /// Why the session ended, once it has.
    pub(crate) fn terminal(&self) -> &Terminal {
        &self.0.terminal
    }

    /// The error for a session that can no longer take requests.
    pub(crate) fn gone(&self) -> Error {
        self.0.terminal.cause()
    }

    /// Queues a command for the session task; drops it if the task is done.
    pub(crate) fn command(&self, request: Request) -> Result<(), Closed> {
        self.push(request, |mail| &mut mail.commands)
    }

    /// Queues a notice for the session task; drops it if the task is done.
    pub(crate) fn notice(&self, notice: Notice) -> Result<(), Closed> {
        self.push(notice, |mail| &mut mail.notices)
    }

    fn push<T>(&self, item: T, queue: fn(&mut Mail) -> &mut VecDeque<T>) -> Result<(), Closed> {
        push(&self.0, item, queue, false)
    }
}

/// A sender that does not keep the session open: its messages are refused once the last
/// [`Handle`] is gone.
#[derive(Debug)]
pub(crate) struct WeakHandle(Arc<Shared>);

impl Handle {
    /// A sender of this session that does not count as a handle.
    pub(crate) fn weak(&self) -> WeakHandle {
        WeakHandle(self.0.clone())
    }
}

impl WeakHandle {
    /// A caller id, unique in the session.
    pub(crate) fn next_id(&self) -> CallerId {
        self.0.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// The session's token, cancelled when the session is lost or closed.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.0.token
    }

    /// Queues a command, unless the session task is done or nobody holds a handle.
    pub(crate) fn command(&self, request: Request) -> Result<(), Closed> {
        self.push(request, |mail| &mut mail.commands)
    }

    /// Queues a notice, unless the session task is done or nobody holds a handle.
    pub(crate) fn notice(&self, notice: Notice) -> Result<(), Closed> {
        self.push(notice, |mail| &mut mail.notices)
    }

    fn push<T>(&self, item: T, queue: fn(&mut Mail) -> &mut VecDeque<T>) -> Result<(), Closed> {
        push(&self.0, item, queue, true)
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

fn take(mail: &mut Mail) -> (VecDeque<Request>, VecDeque<Notice>) {
    (
        std::mem::take(&mut mail.commands),
        std::mem::take(&mut mail.notices),
    )
}

impl Inbox {
    /// Publishes the latest round trip to the handles (see [`Handle::round_trip`]).
    pub(crate) fn set_round_trip(&self, round_trip: std::time::Duration) {
        let nanos = u64::try_from(round_trip.as_nanos()).unwrap_or(u64::MAX);
        self.0.round_trip.store(nanos, Ordering::Relaxed);
    }

    /// Takes every message queued now, commands first and notices second, and frees the
    /// queues' buffers: an idle session holds none. What comes meanwhile waits for the next
    /// turn, after the stream and the timer.
    pub(crate) fn take(&self) -> (VecDeque<Request>, VecDeque<Notice>) {
        take(&mut lock(&self.0))
    }

    /// Ready once there are notices to read.
    pub(crate) fn poll_notices(&self, cx: &mut Context<'_>) -> Poll<Mailed> {
        self.poll_mail(cx, false)
    }

    /// Ready once there is anything to read, or the end.
    pub(crate) fn poll_any(&self, cx: &mut Context<'_>) -> Poll<Mailed> {
        self.poll_mail(cx, true)
    }

    /// Every ready turn counts against the task's tokio budget, as a channel's would: a
    /// session flooded with mail still yields to the other tasks of its worker.
    fn poll_mail(&self, cx: &mut Context<'_>, any: bool) -> Poll<Mailed> {
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let mut mail = lock(&self.0);
        if any && mail.closed {
            return Poll::Ready(Mailed::Ended);
        }
        let ready = !mail.notices.is_empty() || (any && !mail.commands.is_empty());
        if ready {
            coop.made_progress();
            return Poll::Ready(Mailed::Mail);
        }
        if any && mail.handles == 0 {
            return Poll::Ready(Mailed::Ended);
        }
        // One slot for both polls: the session task is their only reader.
        let replaced = match &mail.waker {
            Some(w) if w.will_wake(cx.waker()) => None,
            _ => mail.waker.replace(cx.waker().clone()),
        };
        drop(mail);
        drop(replaced);
        Poll::Pending
    }

    /// Notices are waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is taken.
    pub(crate) async fn notices(&self) -> Mailed {
        std::future::poll_fn(|cx| self.poll_notices(cx)).await
    }

    /// Anything is waiting, or the inbox ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is taken.
    pub(crate) async fn any(&self) -> Mailed {
        std::future::poll_fn(|cx| self.poll_any(cx)).await
    }

    /// Refuses everything from now on and returns what is still queued, commands first
    /// and notices second, for the session task to answer with the cause.
    pub(crate) fn close(&self) -> (VecDeque<Request>, VecDeque<Notice>) {
        let mut mail = lock(&self.0);
        mail.closed = true;
        mail.waker = None;
        let queued = take(&mut mail);
        drop(mail);
        queued
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
    use tokio::sync::oneshot;

    use super::*;
    use crate::session::core::{Command, Control};
    use crate::session::replies::ReplyTx;

    fn pair() -> (Handle, Inbox) {
        inbox(7, Arc::default(), CancellationToken::new())
    }

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
    fn mail_wakes_the_task_and_is_taken_in_order_in_one_turn() {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut task = Context::from_waker(&waker);
        let (handle, inbox) = pair();
        assert!(inbox.poll_any(&mut task).is_pending());
        for caller in 1..=3 {
            assert!(handle.notice(notice(caller)).is_ok());
        }
        // One wake-up for the burst: the task takes the waker when it is woken.
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(matches!(
            inbox.poll_notices(&mut cx()),
            Poll::Ready(Mailed::Mail)
        ));
        let (commands, notices) = inbox.take();
        assert!(commands.is_empty());
        assert_eq!(
            notices.iter().map(caller).collect::<Vec<_>>(),
            [Some(1), Some(2), Some(3)]
        );
        assert_eq!(lock(&inbox.0).notices.capacity(), 0);
        assert!(inbox.poll_any(&mut task).is_pending());
    }

    #[test]
    fn the_inbox_ends_when_the_last_handle_is_dropped_and_the_waiting_task_is_woken() {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let (handle, inbox) = pair();
        let second = handle.clone();
        assert!(inbox.poll_any(&mut cx).is_pending());
        drop(handle);
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        assert!(inbox.poll_any(&mut cx).is_pending());
        assert!(second.notice(notice(9)).is_ok());
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        drop(second);
        // Mail sent before the last handle went is still read, then the inbox ends.
        assert!(matches!(inbox.poll_any(&mut cx), Poll::Ready(Mailed::Mail)));
        let (_, notices) = inbox.take();
        assert_eq!(notices.iter().map(caller).collect::<Vec<_>>(), [Some(9)]);
        assert!(matches!(
            inbox.poll_any(&mut cx),
            Poll::Ready(Mailed::Ended)
        ));
        // Notices alone never report the end.
        assert!(inbox.poll_notices(&mut cx).is_pending());
    }

    #[test]
    fn a_closed_inbox_hands_back_what_was_queued_and_refuses_more() {
        let (handle, inbox) = pair();
        assert!(handle.notice(notice(1)).is_ok());
        let (tx, _rx) = oneshot::channel();
        let close = Request {
            command: Command::Close { caller: 2 },
            reply: ReplyTx::Done(tx),
        };
        assert!(handle.command(close).is_ok());
        let (commands, notices) = inbox.close();
        assert_eq!((commands.len(), notices.len()), (1, 1));
        assert!(handle.notice(notice(2)).is_err());
        assert!(matches!(
            inbox.poll_any(&mut cx()),
            Poll::Ready(Mailed::Ended)
        ));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_flooded_session_task_still_yields_to_the_other_tasks() {
        let (handle, inbox) = pair();
        for caller in 0..1000 {
            assert!(handle.notice(notice(caller)).is_ok());
        }
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other_ran.clone();
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        // The notices stay queued, so every turn is ready at once; only the task budget
        // makes the reader yield.
        let mut turns_before_the_other_task_ran = 0;
        while inbox.notices().await == Mailed::Mail {
            if other_ran.load(Ordering::SeqCst) {
                break;
            }
            turns_before_the_other_task_ran += 1;
            assert!(turns_before_the_other_task_ran < 1000);
        }
        assert!(other_ran.load(Ordering::SeqCst));
    }
}
