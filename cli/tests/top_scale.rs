//! `top` on a fleet whose announcements outgrow one message: 300 announcing sessions, each
//! reading 12 shared locks with long names, against a server whose gRPC message limit is
//! 256 KiB. Version 1's records (up to 1 KiB each) made one describe of 300 KiB, over the
//! limit; the records stay small and the names go to pages, so every message fits and the
//! snapshot is whole. The 10,000-session figures are in the `top` bench (see cli/README.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, NODE, wait_until};
use serde_json::Value;
use ydb_coordination::{Client, RwLockReadGuard, Session, SessionOptions};

const SESSIONS: usize = 300;
const NAMES: usize = 12;
const LIMIT: usize = 256 * 1024;

fn name(i: usize) -> String {
    format!("warehouse-inventory-replica-lock-{i:03}-of-the-eu-west-region-primary-site")
}

#[test]
fn a_fleet_whose_announcements_outgrow_a_message_is_read_whole_within_the_limit() {
    let env = Env::with("top-limit", |b| b.max_message_size(LIMIT));
    let _fleet: Vec<(Session, Vec<RwLockReadGuard>)> = env._rt.block_on(async {
        let client = Client::connect(&env.cs).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..SESSIONS {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let options = SessionOptions::new()
                    .description(format!("inventory reader {i}"))
                    .announce(true);
                let s = client.session(NODE, options).await.unwrap();
                let mut leases = Vec::new();
                for n in 0..NAMES {
                    let guard = s.rwlock(&name(n)).read().await.unwrap();
                    leases.push(guard);
                }
                (s, leases)
            }));
        }
        let mut fleet = Vec::new();
        for t in tasks {
            fleet.push(t.await.unwrap());
        }
        fleet
    });
    let read = || -> (Option<i32>, Value) {
        let out = env.run(&["--json", "top", NODE, "--once", "--timeout", "15s"]);
        (
            out.status.code(),
            serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        )
    };
    wait_until("every session and name, whole", || {
        let (code, v) = read();
        code == Some(0)
            && v["sessions"]
                .as_array()
                .is_some_and(|s| s.len() == SESSIONS)
            && v["semaphores"].as_array().is_some_and(|s| s.len() == NAMES)
    });
    let (_, v) = read();
    assert_eq!(v["complete"], true);
    for s in v["semaphores"].as_array().unwrap() {
        assert_eq!(
            s["owners"].as_array().unwrap().len(),
            SESSIONS,
            "{}",
            s["name"]
        );
    }
    for s in v["sessions"].as_array().unwrap() {
        assert_eq!(s["uses"].as_array().unwrap().len(), NAMES);
    }
    let largest = env.emulator.traffic().largest_response;
    assert!(largest < LIMIT as u64, "{largest} bytes");
}
