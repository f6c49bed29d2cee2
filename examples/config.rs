//! A published configuration: the leader of an election is the only writer; followers
//! subscribe and converge on the newest value, also after the leader changes.
//!
//! The followers rely only on what [`Published::subscribe`] promises: each item is the value
//! as of some moment, a slow follower skips values, never the last, and never reads an older
//! value after a newer one. So they wait for a version at least as new as the one they care
//! about instead of counting items.
//!
//! The writers rely only on what a leadership promises: while its token has not fired, nobody
//! else leads. A leader can lose it (a process starved of CPU for a few seconds cannot show
//! the server it is alive); then it stops writing and campaigns again, and each new leader
//! carries on from the value it finds.
//!
//! Every wait that depends on the server is bounded, so a bug ends the example with an error
//! naming the step instead of a hang.
//!
//! `cargo run --example config`
//!
//! [`Published::subscribe`]: ydb_coordination::recipes::Published::subscribe

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

/// Leads, then publishes versions up to `to`, carrying on from the value it finds, each only
/// while the leadership holds. Returns once `to` is published, still leading.
///
/// A leadership can be lost on the way: a process starved of CPU for a few seconds (a loaded
/// machine) cannot prove to the server that it is alive, its leadership token fires and
/// someone else may lead. The writer then stops writing at once and campaigns again
/// ([`Election::hold`]); when it leads again it reads the value anew, as any new leader does.
///
/// [`Election::hold`]: ydb_coordination::recipes::Election::hold
async fn write(who: &str, manager: &SessionManager, to: u32) -> Result<Leadership, BoxError> {
    let config = manager.published("config");
    let mut campaign = manager.election("config-writer").hold(who.as_bytes());
    'lead: loop {
        let leadership = bounded(&format!("{who} to lead"), campaign.next())
            .await?
            .ok_or("the campaign ended")??;
        let found = match bounded("the current value", config.get()).await? {
            Ok(value) => version(&value)?,
            // Its session ended, and the leadership with it.
            Err(e) if e.is_session_lost() => {
                println!("{who} lost the leadership before reading the value");
                continue 'lead;
            }
            Err(e) => return Err(e.into()),
        };
        println!("{who} leads, finds v{found}");
        for n in found + 1..=to {
            let value = format!("v{n} replicas={n}");
            let publish = config.publish(value.as_bytes());
            match bounded("a publish", leadership.token().run_until_cancelled(publish)).await? {
                Some(done) => done?,
                None => {
                    println!("{who} lost the leadership before v{n} was published");
                    continue 'lead;
                }
            }
        }
        println!("{who} published up to v{to}");
        return Ok(leadership);
    }
}

/// Steps down. A leadership already lost, or a session that ended meanwhile, leaves nothing
/// to undo: the server releases what an ended session held.
async fn step_down(who: &str, leadership: Leadership) -> Result<(), BoxError> {
    match bounded(&format!("{who} to resign"), leadership.resign()).await? {
        Ok(true) => println!("{who} steps down"),
        Ok(false) => println!("{who} had lost the leadership already"),
        Err(e) if e.is_session_lost() => println!("{who}'s session ended before it stepped down"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Reads `values` until a version of at least `want`, adding each to `seen`; checks that
/// versions never go back. A version may be skipped (a slow reader reads the newest), so it
/// waits for "at least", not for `want` itself.
async fn follow(
    who: &str,
    values: &mut ValueStream,
    seen: &mut Vec<u32>,
    want: u32,
) -> Result<(), BoxError> {
    while seen.last().is_none_or(|&last| last < want) {
        let value = bounded("the next configuration", values.next())
            .await?
            .ok_or_else(|| format!("{who}: the stream ended"))??;
        let v = version(&value)?;
        if seen.last().is_some_and(|&last| v <= last) {
            return Err(format!("{who} read v{v} after {seen:?}").into());
        }
        seen.push(v);
    }
    println!("{who} reached v{want} (read {seen:?})");
    Ok(())
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
    let lead_alpha = write("alpha", &alpha, 5).await?;

    let mut tasks = Vec::new();
    for (i, mut values) in streams.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let who = format!("follower-{i}");
            let mut seen = Vec::new();
            follow(&who, &mut values, &mut seen, 5).await?;
            follow(&who, &mut values, &mut seen, 8).await?;
            Ok::<_, BoxError>(())
        }));
    }

    // Bravo queues behind alpha; the new leader carries on from the value it finds.
    let bravo_writes = tokio::spawn({
        let bravo = bravo.clone();
        async move { write("bravo", &bravo, 8).await }
    });
    step_down("alpha", lead_alpha).await?;
    let lead_bravo = bounded("bravo to publish", bravo_writes).await???;

    for task in tasks {
        bounded("a follower to converge", task).await???;
    }
    step_down("bravo", lead_bravo).await?;
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
