//! Leader election: candidates campaign, an observer follows the leader, the leader steps
//! down, the next one dies, and the last takes over.
//!
//! `cargo run --example election`

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use ydb_coordination::SessionOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = common::setup("election").await?;
    let opts = SessionOptions::new().timeout(Duration::from_secs(3));
    let observer = setup.client.session(&setup.node, opts.clone()).await?;
    let mut leaders = observer.election("scheduler").observe();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(change) = leaders.next().await {
            match change {
                Ok(Some(leader)) => {
                    let name = String::from_utf8_lossy(&leader.data).into_owned();
                    println!(
                        "observer: leader is {name} (fencing token {})",
                        leader.fencing_token
                    );
                    seen.push(Some(name));
                }
                Ok(None) => {
                    println!("observer: no leader");
                    seen.push(None);
                }
                Err(e) => {
                    println!("observer: stopped ({e})");
                    break;
                }
            }
            if seen.len() == 5 {
                break;
            }
        }
        seen
    });

    let a = setup.client.session(&setup.node, opts.clone()).await?;
    let b = setup.client.session(&setup.node, opts.clone()).await?;
    let c = setup.client.session(&setup.node, opts.clone()).await?;
    let lead_a = a.election("scheduler").campaign(b"alpha").await?;
    println!("alpha leads");
    let b_campaign = tokio::spawn(async move {
        let election = b.election("scheduler");
        let l = election.campaign(b"bravo").await;
        (b, l)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c_campaign =
        tokio::spawn(async move { c.election("scheduler").campaign(b"charlie").await });
    tokio::time::sleep(Duration::from_millis(100)).await;

    println!("alpha steps down");
    lead_a.resign().await?;
    let (b, lead_b) = b_campaign.await?;
    let lead_b = lead_b?;
    println!("bravo leads; now bravo's process dies without a word");
    match &setup.emulator {
        // The server expires a session it no longer hears from; the emulator can do it now
        // instead of after the session timeout.
        Some(emulator) => {
            emulator.expire_session(&setup.node, b.id());
        }
        None => b.close().await,
    }
    lead_b.cancelled().await;
    println!("bravo's leadership token fired");
    let lead_c = c_campaign.await??;
    println!("charlie leads (fencing token {})", lead_c.fencing_token());
    lead_c.resign().await?;
    let seen = watcher.await?;
    println!("observer saw: {seen:?}");
    setup.client.drop_node(&setup.node).await?;
    Ok(())
}
