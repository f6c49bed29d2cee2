//! The request side of a session stream: a queue the session task fills and the gRPC body
//! drains.
//!
//! A channel would need every request boxed (its slots are allocated in blocks, so an idle
//! session would pay for a block of unboxed requests) and costs atomics per message. This
//! queue keeps the requests inline, under a lock only the two ends of one stream take; a
//! drained queue keeps a buffer of a few requests (what one turn of a session usually sends)
//! and gives back what a burst grew.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;

use crate::proto::SessionRequest;

/// The most requests a drained queue keeps room for.
const KEPT: usize = 4;

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<SessionRequest>,
    /// The body is waiting for a request.
    waker: Option<Waker>,
    /// The sending side is gone: the stream ends once drained.
    closed: bool,
    /// The body is gone: requests are dropped.
    unread: bool,
}

/// The sending side, owned by the session task's `Conn`; dropping it ends the request
/// stream (after the queued requests).
#[derive(Debug)]
pub(crate) struct Outbox(Arc<Mutex<Queue>>);

/// The receiving side, the body of the gRPC request.
#[derive(Debug)]
pub(crate) struct OutboxStream(Arc<Mutex<Queue>>);

/// A new queue.
pub(crate) fn outbox() -> (Outbox, OutboxStream) {
    let shared = Arc::new(Mutex::new(Queue::default()));
    (Outbox(shared.clone()), OutboxStream(shared))
}

fn lock(q: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // Nothing panics while holding the lock; a poisoned queue is still consistent.
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl Outbox {
    /// Queues a request; dropped if the stream is gone (that shows as the inbound side
    /// ending).
    pub(crate) fn send(&self, request: SessionRequest) {
        let waker = {
            let mut q = lock(&self.0);
            if q.unread {
                return;
            }
            q.items.push_back(request);
            q.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let waker = {
            let mut q = lock(&self.0);
            q.closed = true;
            q.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Stream for OutboxStream {
    type Item = SessionRequest;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SessionRequest>> {
        let mut q = lock(&self.0);
        if let Some(request) = q.items.pop_front() {
            if q.items.is_empty() && q.items.capacity() > KEPT {
                q.items = VecDeque::new();
            }
            return Poll::Ready(Some(request));
        }
        if q.closed {
            return Poll::Ready(None);
        }
        match &q.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => q.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for OutboxStream {
    fn drop(&mut self) {
        let mut q = lock(&self.0);
        q.unread = true;
        q.items = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use futures::task::noop_waker_ref;

    use super::*;
    use crate::proto::{self, session_request as rq};

    fn ping(n: u64) -> SessionRequest {
        proto::request(rq::Request::Ping(rq::PingPong { opaque: n }))
    }

    fn opaque(r: &SessionRequest) -> Option<u64> {
        match &r.request {
            Some(rq::Request::Ping(p)) => Some(p.opaque),
            _ => None,
        }
    }

    fn poll(s: &mut OutboxStream) -> Poll<Option<SessionRequest>> {
        Pin::new(s).poll_next(&mut Context::from_waker(noop_waker_ref()))
    }

    #[test]
    fn requests_come_out_in_order_and_a_burst_gives_its_buffer_back() {
        let (tx, mut rx) = outbox();
        assert!(poll(&mut rx).is_pending());
        tx.send(ping(1));
        tx.send(ping(2));
        let Poll::Ready(Some(first)) = poll(&mut rx) else {
            panic!("the first request is queued");
        };
        assert_eq!(opaque(&first), Some(1));
        let Poll::Ready(Some(second)) = poll(&mut rx) else {
            panic!("the second request is queued");
        };
        assert_eq!(opaque(&second), Some(2));
        assert!(lock(&rx.0).items.capacity() <= KEPT);
        assert!(poll(&mut rx).is_pending());
        for n in 0..100 {
            tx.send(ping(n));
        }
        while let Poll::Ready(Some(_)) = poll(&mut rx) {}
        assert_eq!(lock(&rx.0).items.capacity(), 0);
    }

    #[test]
    fn the_stream_ends_after_the_queued_requests_when_the_sender_is_dropped() {
        let (tx, mut rx) = outbox();
        tx.send(ping(7));
        drop(tx);
        assert!(matches!(poll(&mut rx), Poll::Ready(Some(r)) if opaque(&r) == Some(7)));
        assert!(matches!(poll(&mut rx), Poll::Ready(None)));
    }

    #[test]
    fn a_waiting_body_is_woken_by_a_request_and_by_the_end() {
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waker = Waker::from(Arc::new(Counter(woken.clone())));
        let (tx, mut rx) = outbox();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut rx).poll_next(&mut cx).is_pending());
        tx.send(ping(1));
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(Pin::new(&mut rx).poll_next(&mut cx).is_ready());
        assert!(Pin::new(&mut rx).poll_next(&mut cx).is_pending());
        drop(tx);
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn requests_to_a_dropped_body_are_dropped() {
        let (tx, rx) = outbox();
        drop(rx);
        tx.send(ping(1));
        assert!(lock(&tx.0).items.is_empty());
    }

    struct Counter(Arc<std::sync::atomic::AtomicUsize>);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
