//! Several workers contend for one distributed mutex; their critical sections never overlap.
//!
//! `cargo run --example mutex` (embedded emulator) or with `YDB_CONNECTION_STRING` set.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ydb_coordination::SessionOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = common::setup("mutex").await?;
    let inside = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let session = setup
            .client
            .session(&setup.node, SessionOptions::new())
            .await?;
        let inside = inside.clone();
        workers.push(tokio::spawn(async move {
            let mutex = session.mutex("nightly-job");
            for round in 0..3 {
                let guard = mutex.lock().await?;
                let others = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(others, 0, "critical sections overlapped");
                println!(
                    "worker {worker} round {round}: holding the lock (fencing token {})",
                    guard.fencing_token()
                );
                // The work runs only while the lock is held for sure.
                let work = tokio::time::sleep(Duration::from_millis(20));
                if guard.token().run_until_cancelled(work).await.is_none() {
                    println!("worker {worker}: lock lost, work stopped");
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await?;
            }
            session.close().await;
            Ok::<_, ydb_coordination::Error>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    println!("done: 12 critical sections, never two at once");
    setup.client.drop_node(&setup.node).await?;
    Ok(())
}
