//! Fencing: a holder pauses past its lease, another worker takes over, and the storage
//! rejects the stale holder's write because its fencing token is older.
//!
//! `cargo run --example fencing`

#[path = "common/mod.rs"]
mod common;

use std::sync::Mutex;

use ydb_coordination::{FencingToken, SessionOptions};

/// A register that accepts a write only with a fencing token at least as new as the newest
/// it has seen: a conditional write, as a database row with a version column does it.
#[derive(Default)]
struct Storage {
    newest_token: Mutex<FencingToken>,
    value: Mutex<String>,
}

impl Storage {
    // The check and the write are one step under the token's lock: that is the fence.
    #[allow(
        clippy::significant_drop_tightening,
        reason = "the fence's check and write are one step"
    )]
    fn write(&self, token: FencingToken, value: &str) -> Result<(), String> {
        let mut newest = self.newest_token.lock().map_err(|e| e.to_string())?;
        if token < *newest {
            return Err(format!("rejected: token {token} is older than {}", *newest));
        }
        *newest = token;
        *self.value.lock().map_err(|e| e.to_string())? = value.to_string();
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = common::setup("fencing").await?;
    let storage = Storage::default();
    // The default session timeout (10 s). The slow worker's session is expired (or closed)
    // at once below, so nothing waits for a timeout; a short one would only let the fast
    // worker, on a machine that starves it of CPU for a couple of seconds, lose its session
    // too.
    let opts = SessionOptions::new();

    let slow = setup.client.session(&setup.node, opts.clone()).await?;
    let slow_guard = slow.mutex("ledger").lock().await?;
    let slow_token = slow_guard.fencing_token();
    storage.write(slow_token, "slow: begin")?;
    println!("slow worker holds the lock with token {slow_token}, then stalls (a long GC pause)");

    // The slow worker's session is lost while it is paused.
    match &setup.emulator {
        Some(emulator) => {
            emulator.expire_session(&setup.node, slow.id());
        }
        None => slow.close().await,
    }

    let fast = setup.client.session(&setup.node, opts).await?;
    let fast_guard = fast.mutex("ledger").lock().await?;
    let fast_token = fast_guard.fencing_token();
    storage.write(fast_token, "fast: took over")?;
    println!("fast worker took the lock with token {fast_token} and wrote");

    // The slow worker wakes up and, ignoring its lease, writes anyway.
    println!(
        "slow worker wakes up; its lease token fired: {}",
        slow_guard.is_lost()
    );
    match storage.write(slow_token, "slow: stale write") {
        Ok(()) => return Err("the stale write was accepted".into()),
        Err(why) => println!("storage: {why}"),
    }
    println!(
        "final value: {:?}",
        storage.value.lock().map_err(|e| e.to_string())?
    );
    fast_guard.unlock().await?;
    setup.client.drop_node(&setup.node).await?;
    Ok(())
}
