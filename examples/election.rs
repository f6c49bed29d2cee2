//! Leader election: candidates campaign, an observer follows the leader, the leader steps
//! down, the next one dies, and the last takes over.
//!
//! The observer relies only on what [`Election::observe`] promises: each item is the leader
//! as of some moment, intermediate leaders may be skipped when changes come faster than it
//! reads, and the final state is never skipped. So it does not count items: when the main
//! task says it is done, the observer reads until it has seen the final state (no leader).
//!
//! Every wait that depends on the server is bounded, so a bug ends the example with an error
//! naming the step instead of a hang.
//!
//! `cargo run --example election`

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::oneshot;
use ydb_coordination::recipes::LeaderStream;
use ydb_coordination::{Session, SessionOptions, config::DescribeOptions};

use common::{BoxError, bounded};

/// Waits until `waiters` candidates queue behind the leader, so that they queue in order.
async fn wait_for_waiters(session: &Session, waiters: usize) -> Result<(), BoxError> {
    let what = format!("{waiters} candidate(s) to queue");
    bounded(&what, async {
        loop {
            let d = session
                .describe_semaphore("scheduler", DescribeOptions::new().waiters(true))
                .await?;
            if d.waiters.len() >= waiters {
                return Ok::<_, BoxError>(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?
}

/// Follows the leader until told that the main task is done, then until the final state
/// (no leader) has been seen. Returns every state it saw, in order.
async fn observe(
    mut leaders: LeaderStream,
    mut done: oneshot::Receiver<()>,
) -> Result<Vec<Option<String>>, BoxError> {
    let mut seen: Vec<Option<String>> = Vec::new();
    let mut told = false;
    loop {
        if told && matches!(seen.last(), Some(None)) {
            return Ok(seen);
        }
        let change = if told {
            bounded("the observer to see that nobody leads", leaders.next()).await?
        } else {
            // Before the signal the next change may take as long as the main task does
            // (whose steps are bounded). `next()` is cancel safe: nothing is lost here.
            tokio::select! {
                _ = &mut done => {
                    told = true;
                    continue;
                }
                change = leaders.next() => change,
            }
        };
        match change {
            Some(Ok(Some(leader))) => {
                let name = String::from_utf8_lossy(&leader.data).into_owned();
                println!(
                    "observer: leader is {name} (fencing token {})",
                    leader.fencing_token
                );
                seen.push(Some(name));
            }
            Some(Ok(None)) => {
                println!("observer: no leader");
                seen.push(None);
            }
            Some(Err(e)) => return Err(format!("observer: stopped ({e})").into()),
            None => return Err("observer: the stream ended".into()),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let setup = bounded("the setup", common::setup("election"))
        .await?
        .map_err(|e| e.to_string())?;
    // The default session timeout (10 s). A process dies here by having its session expired
    // (or closed) at once, so nothing waits for a timeout; a short one would only let a
    // process starved of CPU for a couple of seconds lose its own session midway.
    let opts = SessionOptions::new();
    let session = |what| bounded(what, setup.client.session(&setup.node, opts.clone()));

    let observer = session("the observer's session").await??;
    let (done_tx, done_rx) = oneshot::channel();
    let watcher = tokio::spawn(observe(observer.election("scheduler").observe(), done_rx));

    let a = session("alpha's session").await??;
    let b = session("bravo's session").await??;
    let c = session("charlie's session").await??;
    let lead_a = bounded("alpha to lead", a.election("scheduler").campaign(b"alpha")).await??;
    println!("alpha leads");
    let b_campaign = tokio::spawn(async move {
        let l = b.election("scheduler").campaign(b"bravo").await;
        (b, l)
    });
    wait_for_waiters(&a, 1).await?;
    println!("bravo waits");
    let c_campaign =
        tokio::spawn(async move { c.election("scheduler").campaign(b"charlie").await });
    wait_for_waiters(&a, 2).await?;
    println!("charlie waits");

    println!("alpha steps down");
    bounded("alpha to resign", lead_a.resign()).await??;
    let (b, lead_b) = bounded("bravo to lead", b_campaign).await??;
    let lead_b = lead_b?;
    println!("bravo leads; now bravo's process dies without a word");
    match &setup.emulator {
        // The server expires a session it no longer hears from; the emulator can do it now
        // instead of after the session timeout.
        Some(emulator) => {
            emulator.expire_session(&setup.node, b.id());
        }
        None => bounded("bravo's session to close", b.close()).await?,
    }
    bounded("bravo's leadership token to fire", lead_b.cancelled()).await?;
    println!("bravo's leadership token fired");
    let lead_c = bounded("charlie to lead", c_campaign).await???;
    println!("charlie leads (fencing token {})", lead_c.fencing_token());
    bounded("charlie to resign", lead_c.resign()).await??;
    println!("charlie steps down");

    // Nobody leads now, and the observer will see it: it may skip a short tenure (charlie's)
    // but never the final state.
    let _ = done_tx.send(());
    let seen = bounded("the observer to finish", watcher).await???;
    println!("observer saw: {seen:?}");
    check(&seen)?;

    bounded(
        "the node to be dropped",
        setup.client.drop_node(&setup.node),
    )
    .await??;
    Ok(())
}

/// Checks the observer's view against what `observe()` promises: it ends with no leader, no
/// state repeats back to back, and the leaders it saw took office in campaign order.
fn check(seen: &[Option<String>]) -> Result<(), BoxError> {
    if seen.last() != Some(&None) {
        return Err(format!("the observer's last state is not \"no leader\": {seen:?}").into());
    }
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("the observer saw a state twice in a row: {seen:?}").into());
    }
    let order = ["alpha", "bravo", "charlie"];
    let mut next = 0;
    for name in seen.iter().flatten() {
        match order[next..].iter().position(|o| o == name) {
            Some(i) => next += i + 1,
            None => return Err(format!("the observer saw leaders out of order: {seen:?}").into()),
        }
    }
    Ok(())
}
