//! A pool of 3: at most three of eight workers call a fragile API at once.
//!
//! `cargo run --example semaphore`

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ydb_coordination::SessionOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = common::setup("semaphore").await?;
    let in_use = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..8 {
        let session = setup
            .client
            .session(&setup.node, SessionOptions::new())
            .await?;
        let (in_use, peak) = (in_use.clone(), peak.clone());
        workers.push(tokio::spawn(async move {
            let pool = session.semaphore("fragile-api", 3);
            let permit = pool.acquire(1).await?;
            let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            println!("worker {worker}: calling the API ({now} of 3 slots in use)");
            tokio::time::sleep(Duration::from_millis(30)).await;
            in_use.fetch_sub(1, Ordering::SeqCst);
            permit.release().await?;
            session.close().await;
            Ok::<_, ydb_coordination::Error>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3);
    println!("done: at most {peak} calls at once");
    setup.client.drop_node(&setup.node).await?;
    Ok(())
}
