//! A one-slot, latest-value channel from the session task to one watch subscriber.
//!
//! The task must never block on a slow subscriber, and a subscriber must never miss the
//! newest state: a bounded queue can do only one of the two. Here a new item replaces an
//! unread one (like `tokio::sync::watch`), so whatever the reader's speed, the next item it
//! reads is the newest the session has. The `resynced` flag of a replaced update carries
//! over, so a reader still learns that a reattach happened in between.

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

use super::types::WatchUpdate;
use crate::error::Result;

#[derive(Debug, Default)]
struct Mailbox {
    item: Option<Result<WatchUpdate>>,
    sender_gone: bool,
    receiver_gone: bool,
}

#[derive(Debug, Default)]
struct Shared {
    slot: Mutex<Mailbox>,
    waker: AtomicWaker,
}

impl Shared {
    fn with<R>(&self, f: impl FnOnce(&mut Mailbox) -> R) -> R {
        f(&mut self.slot.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The session task's end.
#[derive(Debug)]
pub(crate) struct Sender {
    shared: Arc<Shared>,
}

/// The subscriber's end.
#[derive(Debug)]
pub(crate) struct Receiver {
    shared: Arc<Shared>,
}

/// A connected pair.
pub(crate) fn channel() -> (Sender, Receiver) {
    let shared = Arc::new(Shared::default());
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl Sender {
    /// Puts `item` in the slot, replacing an unread one. An error stays once put: it is the
    /// last item of the stream. Returns `false` when the receiver is gone.
    pub(crate) fn put(&self, item: Result<WatchUpdate>) -> bool {
        let open = self.shared.with(|slot| {
            if slot.receiver_gone {
                return false;
            }
            match (&slot.item, item) {
                (Some(Err(_)), _) => {}
                (Some(Ok(old)), Ok(mut new)) => {
                    new.resynced |= old.resynced;
                    slot.item = Some(Ok(new));
                }
                (_, item) => slot.item = Some(item),
            }
            true
        });
        self.shared.waker.wake();
        open
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.shared.with(|slot| slot.sender_gone = true);
        self.shared.waker.wake();
    }
}

impl Receiver {
    /// The next item; `Ready(None)` once the sender is gone and the slot is empty.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<WatchUpdate>>> {
        let take = |slot: &mut Mailbox| match slot.item.take() {
            Some(item) => Poll::Ready(Some(item)),
            None if slot.sender_gone => Poll::Ready(None),
            None => Poll::Pending,
        };
        if let Poll::Ready(r) = self.shared.with(take) {
            return Poll::Ready(r);
        }
        // Register, then look again: a put between the two checks is not missed.
        self.shared.waker.register(cx.waker());
        self.shared.with(take)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shared.with(|slot| {
            slot.receiver_gone = true;
            slot.item = None;
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::task::Waker;

    use super::*;
    use crate::error::{Error, ErrorKind};
    use crate::session::types::SemaphoreDescription;

    fn update(data: &[u8], resynced: bool) -> Result<WatchUpdate> {
        Ok(WatchUpdate {
            description: SemaphoreDescription {
                data: data.to_vec(),
                ..SemaphoreDescription::default()
            },
            resynced,
        })
    }

    fn recv(rx: &mut Receiver) -> Poll<Option<Result<WatchUpdate>>> {
        rx.poll_recv(&mut Context::from_waker(Waker::noop()))
    }

    fn data(p: Poll<Option<Result<WatchUpdate>>>) -> Vec<u8> {
        match p {
            Poll::Ready(Some(Ok(u))) => u.description.data,
            other => panic!("expected an update, got {other:?}"),
        }
    }

    #[test]
    fn a_slow_reader_reads_the_newest_item() {
        let (tx, mut rx) = channel();
        for i in 0..100u8 {
            assert!(tx.put(update(&[i], false)));
        }
        assert_eq!(data(recv(&mut rx)), vec![99]);
        assert!(recv(&mut rx).is_pending());
    }

    #[test]
    fn a_replaced_update_keeps_its_resynced_flag() {
        let (tx, mut rx) = channel();
        tx.put(update(b"a", true));
        tx.put(update(b"b", false));
        match recv(&mut rx) {
            Poll::Ready(Some(Ok(u))) => {
                assert!(u.resynced);
                assert_eq!(u.description.data, b"b");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_is_the_last_item() {
        let (tx, mut rx) = channel();
        tx.put(update(b"a", false));
        tx.put(Err(Error::new(ErrorKind::NotFound, "gone")));
        tx.put(update(b"b", false));
        assert!(
            matches!(recv(&mut rx), Poll::Ready(Some(Err(e))) if e.kind() == ErrorKind::NotFound)
        );
    }

    #[test]
    fn the_stream_ends_after_the_sender_is_dropped_and_the_slot_read() {
        let (tx, mut rx) = channel();
        tx.put(update(b"a", false));
        drop(tx);
        assert_eq!(data(recv(&mut rx)), b"a");
        assert!(matches!(recv(&mut rx), Poll::Ready(None)));
    }

    #[test]
    fn the_sender_sees_a_dropped_receiver() {
        let (tx, rx) = channel();
        assert!(tx.put(update(b"a", false)));
        drop(rx);
        assert!(!tx.put(update(b"b", false)));
    }
}
