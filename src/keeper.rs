//! One task that runs many small waits side by side: what a held lock needs done when it
//! ends (a lock space's watch of its parts, a bounded hold's deadline) and what keeps a
//! group's membership cost a future in its source's keeper, not a task of its own.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;

/// A boxed wait, for a keeper of waits of several types.
pub(crate) type Kept = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The sending end of a keeper's task, started with the first item handed to it.
pub(crate) struct Keeper<T> {
    items: Mutex<Option<mpsc::UnboundedSender<T>>>,
}

impl<T> fmt::Debug for Keeper<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let running = items.as_ref().is_some_and(|tx| !tx.is_closed());
        drop(items);
        f.debug_struct("Keeper").field("running", &running).finish()
    }
}

impl<T> Default for Keeper<T> {
    fn default() -> Self {
        Self {
            items: Mutex::new(None),
        }
    }
}

impl<T: Send + 'static> Keeper<T> {
    /// Hands `item` to the task, starting it with `start` (on the current runtime) if there
    /// is none, or if the runtime it ran on has shut down.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime when the task must be started.
    pub(crate) fn hand<F>(&self, item: T, start: impl FnOnce(mpsc::UnboundedReceiver<T>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let item = match items.as_ref() {
            Some(tx) => match tx.send(item) {
                Ok(()) => return,
                Err(mpsc::error::SendError(item)) => item,
            },
            None => item,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // A new channel's receiver is alive until the task below ends.
        let _ = tx.send(item);
        *items = Some(tx);
        drop(items);
        tokio::spawn(start(rx));
    }
}

impl Keeper<Kept> {
    /// Runs `wait` in the task.
    pub(crate) fn keep(&self, wait: Kept) {
        self.hand(wait, |rx| run(rx, |wait| wait));
    }
}

/// A keeper's task: each item made into a future by `wait` and run side by side, until no
/// item can come any more (the keeper is gone) and every future has ended.
pub(crate) async fn run<T, F: Future<Output = ()>>(
    mut items: mpsc::UnboundedReceiver<T>,
    wait: impl Fn(T) -> F,
) {
    let mut waiting = FuturesUnordered::new();
    loop {
        tokio::select! {
            next = items.recv() => match next {
                Some(item) => waiting.push(wait(item)),
                None => break,
            },
            Some(()) = waiting.next(), if !waiting.is_empty() => {}
        }
    }
    while waiting.next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio_util::sync::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn waits_run_side_by_side_in_one_task_that_ends_after_the_keeper_and_its_waits() {
        let keeper: Keeper<Kept> = Keeper::default();
        let (done, go) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        for _ in 0..10 {
            let (done, go) = (done.clone(), go.clone());
            keeper.keep(Box::pin(async move {
                go.cancelled().await;
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert_eq!(tasks(), before + 1, "one task for every wait");
        drop(keeper);
        tokio::task::yield_now().await;
        assert_eq!(
            tasks(),
            before + 1,
            "the waits keep the task after the keeper"
        );
        go.cancel();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(done.load(Ordering::SeqCst), 10);
        assert_eq!(tasks(), before, "the task ended with its last wait");
    }

    #[test]
    fn a_keeper_whose_runtime_shut_down_starts_again_on_the_next() {
        let keeper = &Keeper::<Kept>::default();
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap_or_else(|e| panic!("a runtime: {e}"));
            let ran = ran.clone();
            runtime.block_on(async move {
                let (tx, rx) = tokio::sync::oneshot::channel();
                keeper.keep(Box::pin(async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    let _ = tx.send(());
                }));
                let waited = tokio::time::timeout(std::time::Duration::from_secs(10), rx).await;
                assert!(matches!(waited, Ok(Ok(()))), "the wait never ran");
            });
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }
}
