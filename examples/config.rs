//! A published configuration: the leader of an election is the only writer; followers
//! subscribe and converge on the newest value, also after the leader changes.
//!
//! The followers rely only on what [`Published::subscribe`] promises: each item is the value
//! as of some moment, a slow follower skips values, never the last, and never reads an older
//! value after a newer one. So they wait for the version they care about instead of counting
//! items.
//!
//! Every wait that depends on the server is bounded, so a bug ends the example with an error
//! naming the step instead of a hang.
//!
//! `cargo run --example config`
//!
//! [`Published::subscribe`]: ydb_coordination::Published::subscribe

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use ydb_coordination::recipes::ValueStream;
use ydb_coordination::{Leadership, SessionManager, SessionOptions};

use common::{BoxError, bounded};

/// The configuration's version: `v<N> replicas=<N>`, or 0 for nothing published yet.
fn version(value: &[u8]) -> Result<u32, BoxError> {
    if value.is_empty() {
        return Ok(0);
    }
    let text = std::str::from_utf8(value)?;
    let n = text
        .strip_prefix('v')
        .and_then(|rest| rest.split(' ').next())
        .ok_or_else(|| format!("not a configuration: {text:?}"))?;
    Ok(n.parse()?)
}

/// Publishes versions `from..=to` as the leader, each only while the leadership holds.
async fn publish(
    who: &str,
    manager: &SessionManager,
    leadership: &Leadership,
    from: u32,
    to: u32,
) -> Result<(), BoxError> {
    let config = manager.published("config");
    for n in from..=to {
        let value = format!("v{n} replicas={n}");
        let publish = config.publish(value.as_bytes());
        match bounded("a publish", leadership.token().run_until_cancelled(publish)).await? {
            Some(done) => done?,
            None => return Err(format!("{who} lost the leadership while publishing").into()),
        }
    }
    println!("{who} published v{from}..=v{to}");
    Ok(())
}

/// Reads `values` until version `want`; checks that versions never go back. Returns the
/// versions read.
async fn follow(who: &str, values: &mut ValueStream, want: u32) -> Result<Vec<u32>, BoxError> {
    let mut seen: Vec<u32> = Vec::new();
    loop {
        let value = bounded("the next configuration", values.next())
            .await?
            .ok_or_else(|| format!("{who}: the stream ended"))??;
        let v = version(&value)?;
        if seen.last().is_some_and(|&last| v <= last) {
            return Err(format!("{who} read v{v} after {seen:?}").into());
        }
        seen.push(v);
        if v == want {
            println!("{who} converged on v{want} (read {seen:?})");
            return Ok(seen);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let setup = bounded("the setup", common::setup("config"))
        .await?
        .map_err(|e| e.to_string())?;
    let opts = SessionOptions::new().timeout(Duration::from_secs(3));
    let manager = || setup.client.session_manager(&setup.node, opts.clone());

    // Three followers subscribe first: nothing is published yet.
    let followers: Vec<SessionManager> = (0..3).map(|_| manager()).collect();
    let mut streams = Vec::new();
    for (i, follower) in followers.iter().enumerate() {
        let mut values = follower.published("config").subscribe();
        let first = bounded("the first value", values.next())
            .await?
            .ok_or("the stream ended")??;
        println!("follower-{i} starts at v{}", version(&first)?);
        streams.push(values);
    }

    // Two candidates; the leader is the only writer.
    let (alpha, bravo) = (manager(), manager());
    let lead_alpha = bounded(
        "alpha to lead",
        alpha.election("config-writer").campaign(b"alpha"),
    )
    .await??;
    println!("alpha leads and publishes");
    let bravo_campaign = tokio::spawn({
        let bravo = bravo.clone();
        async move { bravo.election("config-writer").campaign(b"bravo").await }
    });
    publish("alpha", &alpha, &lead_alpha, 1, 5).await?;

    let mut tasks = Vec::new();
    for (i, mut values) in streams.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let who = format!("follower-{i}");
            follow(&who, &mut values, 5).await?;
            follow(&who, &mut values, 8).await?;
            Ok::<_, BoxError>(())
        }));
    }

    println!("alpha steps down");
    bounded("alpha to resign", lead_alpha.resign()).await??;
    let lead_bravo = bounded("bravo to lead", bravo_campaign).await???;
    // The new leader carries on from the value it finds.
    let now = bounded("the current value", bravo.published("config").get()).await??;
    let next = version(&now)? + 1;
    println!("bravo leads, finds v{}, publishes", next - 1);
    publish("bravo", &bravo, &lead_bravo, next, 8).await?;

    for task in tasks {
        bounded("a follower to converge", task).await???;
    }
    bounded("bravo to resign", lead_bravo.resign()).await??;
    for m in followers.iter().chain([&alpha, &bravo]) {
        bounded("a manager to shut down", m.shutdown()).await?;
    }
    bounded(
        "the node to be dropped",
        setup.client.drop_node(&setup.node),
    )
    .await??;
    Ok(())
}
