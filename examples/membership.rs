//! Group membership: three workers join a group, each watches the member set, one worker
//! dies, and the two others see it leave.
//!
//! The watchers rely only on what [`Group::watch`] promises: each item is the whole set as
//! of some moment, a slow reader may skip sets, and the last set is never skipped. So they
//! wait for the set they care about instead of counting items.
//!
//! Every wait that depends on the server is bounded, so a bug ends the example with an error
//! naming the step instead of a hang.
//!
//! `cargo run --example membership`
//!
//! [`Group::watch`]: ydb_coordination::Group::watch

#[path = "common/mod.rs"]
mod common;

use futures::StreamExt;
use tokio::sync::oneshot;
use ydb_coordination::recipes::MemberStream;
use ydb_coordination::{SessionOptions, recipes::Member};

use common::{BoxError, bounded};

/// The members' names.
fn names(set: &[Member]) -> Vec<String> {
    set.iter()
        .map(|m| String::from_utf8_lossy(&m.data).into_owned())
        .collect()
}

/// Reads `sets` (each read bounded) until `done` says a set is the one wanted.
async fn wait_for(
    who: &str,
    sets: &mut MemberStream,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Result<(), BoxError> {
    loop {
        let set = bounded(what, sets.next())
            .await?
            .ok_or_else(|| format!("{who}: the stream ended"))??;
        let names = names(&set);
        println!("{who} sees {names:?}");
        if done(&names) {
            return Ok(());
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let setup = bounded("the setup", common::setup("membership"))
        .await?
        .map_err(|e| e.to_string())?;
    // The default session timeout (10 s). A process dies here by having its session expired
    // (or closed) at once, so nothing waits for a timeout; a short one would only let a
    // process starved of CPU for a couple of seconds lose its own session midway.
    let opts = SessionOptions::new();
    let all = ["worker-1", "worker-2", "worker-3"];

    let mut sessions = Vec::new();
    let mut memberships = Vec::new();
    for name in all {
        let session = bounded(
            "a worker's session",
            setup.client.session(&setup.node, opts.clone()),
        )
        .await??;
        let membership = bounded(
            "a worker to join",
            session.group("workers").join(name.as_bytes()),
        )
        .await??;
        println!("{name} joined as session {}", session.id());
        sessions.push(session);
        memberships.push(membership);
    }

    // Workers 1 and 3 watch the set: all three, then worker-2 gone.
    let mut watchers = Vec::new();
    let mut ready = Vec::new();
    for i in [0, 2] {
        let who = all[i];
        let mut sets = sessions[i].group("workers").watch();
        let (seen_all, all_seen) = oneshot::channel();
        ready.push(all_seen);
        watchers.push(tokio::spawn(async move {
            wait_for(who, &mut sets, "all three members", |n| n.len() == 3).await?;
            let _ = seen_all.send(());
            wait_for(who, &mut sets, "worker-2 to leave", |n| {
                n == ["worker-1", "worker-3"]
            })
            .await?;
            println!("{who}: worker-2 has left");
            Ok::<_, BoxError>(())
        }));
    }
    for all_seen in ready {
        bounded("the watchers to see all three", all_seen).await??;
    }

    println!("worker-2's process dies without a word");
    let dead = &sessions[1];
    match &setup.emulator {
        // The server expires a session it no longer hears from; the emulator can do it now
        // instead of after the session timeout.
        Some(emulator) => {
            emulator.expire_session(&setup.node, dead.id());
        }
        None => bounded("worker-2's session to close", dead.close()).await?,
    }
    for watcher in watchers {
        bounded("a watcher to finish", watcher).await???;
    }

    let members = bounded("the members", sessions[0].group("workers").members()).await??;
    if names(&members) != ["worker-1", "worker-3"] {
        return Err(format!("unexpected members: {:?}", names(&members)).into());
    }
    for membership in memberships {
        // worker-2's was lost with its session: `false`, or its session's error.
        let _ = bounded("a worker to leave", membership.leave()).await?;
    }
    bounded(
        "the node to be dropped",
        setup.client.drop_node(&setup.node),
    )
    .await??;
    Ok(())
}
