//! The retry loop: `client.sessions()` yields a new session each time the last one is lost,
//! and the work resumes there. The session is lost on purpose halfway.
//!
//! `cargo run --example sessions`

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use ydb_coordination::SessionOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = common::setup("sessions").await?;
    let mut sessions = setup.client.sessions(&setup.node, SessionOptions::new());
    let mut done = 0;
    let mut lost_once = false;
    while let Some(session) = sessions.next().await {
        let session = session?;
        println!("session {} started", session.id());
        let guard = match session.mutex("job").lock().await {
            Ok(guard) => guard,
            Err(e) if e.is_session_lost() => continue,
            Err(e) => return Err(e.into()),
        };
        println!(
            "  holding the lock, fencing token {}",
            guard.fencing_token()
        );
        while done < 6 {
            let step = tokio::time::sleep(Duration::from_millis(50));
            if guard.token().run_until_cancelled(step).await.is_none() {
                println!("  session lost after {done} steps: the lock's token fired");
                break;
            }
            done += 1;
            println!("  step {done} done");
            if done == 3 && !lost_once {
                lost_once = true;
                match &setup.emulator {
                    Some(emulator) => {
                        println!("  (the server expires the session)");
                        emulator.expire_session(&setup.node, session.id());
                    }
                    None => {
                        println!("  (closing the session to simulate its loss)");
                        session.close().await;
                    }
                }
            }
        }
        if done == 6 {
            guard.unlock().await?;
            session.close().await;
            break;
        }
    }
    println!("all 6 steps done across two sessions");
    setup.client.drop_node(&setup.node).await?;
    Ok(())
}
